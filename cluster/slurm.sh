#!/usr/bin/env bash
# SLURM: one Ray head on the first node, workers on the rest, then the experiment on the head (the batch
# script runs there: the dashboard stays on its loopback). The nodes share the cluster's filesystem
# (cluster.shared_fs=true). With no arguments, the paper experiment:
#   sbatch cluster/slurm.sh                      # +experiment=paper/parallel_r1_seen
#   sbatch cluster/slurm.sh +experiment=paper/parallel_r1_unseen_s2
#SBATCH --job-name=parallax
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=8
#SBATCH --cpus-per-task=64
#SBATCH --time=48:00:00
set -euo pipefail
[ $# -gt 0 ] || set -- +experiment=paper/parallel_r1_seen
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
python -m orchestrator cluster.address="$head_ip:$port" cluster.shared_fs=true "$@"
