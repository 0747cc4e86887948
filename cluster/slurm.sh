#!/usr/bin/env bash
# SLURM: one Ray head on the first node, workers on the rest, then the experiment on the head (the batch
# script runs there: the dashboard stays on its loopback). The nodes share the cluster's filesystem
# (cluster.shared_fs=true). With no arguments, the paper experiment:
#   sbatch cluster/slurm.sh                      # +experiment=paper/parallel_r1_seen
#   sbatch cluster/slurm.sh +experiment=paper/parallel_r1_unseen_s2
#
# Preemption and the time limit (docs/operations.md, "What clusters do to a run"): Slurm sends this script
# SIGUSR1 300 s before the job's end (--signal=B:USR1@300); the script passes it to the driver, which
# finishes the step in flight, writes and verifies a checkpoint and exits 75 within its grace period
# (PARALLAX_GRACE_S, 60 s by default: keep it under the 300 s). On 75 the job requeues itself and its next
# start continues the run (resume=auto, the run directory named by the job id, which a requeue keeps).
# A preemption by a higher-priority job sends SIGTERM to every process of the job at once, Ray's own
# included: the script passes it on too, but nothing can be saved then and the run continues from its
# newest periodic checkpoint (trainer.save_every_min, 10 minutes by default). Give the partition a
# GraceTime of at least PARALLAX_GRACE_S.
#SBATCH --job-name=parallax
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=8
#SBATCH --cpus-per-task=64
# all of the node's memory: the driver packs the model and the actors hold engines, learners and their copies
#SBATCH --mem=0
#SBATCH --time=48:00:00
#SBATCH --signal=B:USR1@300
#SBATCH --requeue
#SBATCH --open-mode=append
set -euo pipefail
[ $# -gt 0 ] || set -- +experiment=paper/parallel_r1_seen
# the data's place, as every launcher names it (the paper experiment's SFT stage reads Parallel-GSM8K there)
export PARALLAX_DATA_DIR="${PARALLAX_DATA_DIR:-$PWD/data}"
nodes=($(scontrol show hostnames "$SLURM_JOB_NODELIST"))
head=${nodes[0]}
head_ip=$(srun --nodes=1 --ntasks=1 -w "$head" hostname --ip-address | awk '{print $1}')
port=6379
srun --nodes=1 --ntasks=1 -w "$head" ray start --head --node-ip-address="$head_ip" --port=$port \
  --dashboard-host=127.0.0.1 --block &
sleep 15
for node in "${nodes[@]:1}"; do
  srun --nodes=1 --ntasks=1 -w "$node" ray start --address="$head_ip:$port" --block &
done
sleep 15
# The driver runs in the background so that this shell takes the signal at once (bash runs a trap only
# between commands) and hands it to the driver alone; `wait` returns early on a trapped signal, hence the loop.
python -m orchestrator cluster.address="$head_ip:$port" cluster.shared_fs=true \
  hydra.run.dir="runs/slurm-${SLURM_JOB_ID}" resume=auto "$@" &
driver=$!
trap 'echo "slurm.sh: SIGUSR1 (the time limit is near): stopping the driver"; kill -USR1 "$driver"' USR1
trap 'echo "slurm.sh: SIGTERM (preempted): stopping the driver"; kill -TERM "$driver"' TERM
rc=0
while :; do
  wait "$driver" && rc=0 || rc=$?
  kill -0 "$driver" 2>/dev/null || break  # a trap interrupted the wait: the driver is still saving
done
if [ "$rc" -eq 75 ]; then
  echo "slurm.sh: the driver saved and stopped (exit 75); requeueing job $SLURM_JOB_ID to continue (resume=auto)"
  scontrol requeue "$SLURM_JOB_ID" || echo "slurm.sh: the requeue failed; submit this script again: it resumes" >&2
fi
exit "$rc"
