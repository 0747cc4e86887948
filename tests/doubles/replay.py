"""Replay: a logits processor that makes any model emit a known script (tests and the benches).

A random tiny model driven by `Replay` writes teacher traces token by token while everything
else — the model forward, KV cache, batching, forks, joins, positions, the record — is real.
`role_scripts` splits a trace (a `formats` tree) into what each executed request emits;
`parallax.layouts.sft_records.teacher_role_scripts` does the same for a teacher trace's text. The one replay
test double of the tests and the benches; engines take it through `parallax.executors.base.engine_processor`,
and vLLM, which runs no callback in its workers, takes each request's script (`request_args`), which
`script_vllm.ScriptProcessor` pins there (`VLLMEngine(logits_processors=[SCRIPT_PROCESSOR])`).
"""

from __future__ import annotations

import torch

from parallax.executors.base import RequestView
from parallax.formats import SUBTASK, Tree, render
from parallax.formats.spec import resolve_spec

SCRIPT_KEY = "parallax_script"  # a request's script in vLLM's `SamplingParams.extra_args`
SCRIPT_PROCESSOR = "doubles.script_vllm:ScriptProcessor"  # loaded by name in vLLM's workers (tests/ on sys.path)


class Replay:
    """Logits processor: row (traj, role) emits scripts[traj][role] token by token, then EOS.

    A row whose tokens shrink or change under it (the request executor cut a completion and
    dropped its tail) is replayed from its start again.

    A token the executor forced (a closing tag at a cap) re-synchronises the script just after
    that tag's next occurrence, so a capped run continues the script where the structure does.

    Commutes with grammar masking (the executor may then check its draw instead of masking
    first): it pins the script token if that is allowed, else the best allowed token, so
    drawing from it unmasked and redrawing masked only when refused gives the same token.
    """

    commutes_with_mask = True

    def __init__(self, scripts: list[dict[tuple, list[int]]], eos: int):
        self.scripts, self.eos = scripts, eos
        self.state: dict[tuple, list[int]] = {}  # (traj, role) -> [script pointer, tokens seen]

    def _pointer(self, r: RequestView) -> int:
        script = self.scripts[r.traj].get(r.role, [])
        st = self.state.setdefault((r.traj, r.role), [0, 0, None])
        if len(r.tokens) < st[1] or (st[1] and r.tokens[st[1] - 1] != st[2]):
            st[:] = [0, 0, None]  # the row dropped tokens this processor saw (a cut completion): re-sync
        for tok in r.tokens[st[1]:]:
            if st[0] < len(script) and script[st[0]] == tok:
                st[0] += 1
            else:  # forced: jump past the same tag in the script
                rest = script[st[0]:]
                st[0] = st[0] + rest.index(tok) + 1 if tok in rest else len(script)
        st[1] = len(r.tokens)
        st[2] = r.tokens[-1] if r.tokens else None
        return st[0]

    def request_args(self, row: RequestView) -> dict[str, list[int]]:
        """What `row` writes from here on, then EOS, for an engine that pins tokens in its own workers
        (vLLM, through `script_vllm.ScriptProcessor`). Exact where no grammar mask or ban intervenes."""
        return {SCRIPT_KEY: self.scripts[row.traj].get(row.role, [])[self._pointer(row):] + [self.eos]}

    def __call__(self, rows: list[RequestView], x: torch.Tensor) -> torch.Tensor:
        out = torch.full_like(x, float("-inf"))  # [S, V]
        for i, r in enumerate(rows):
            script, ptr = self.scripts[r.traj].get(r.role, []), self._pointer(r)
            target = script[ptr] if ptr < len(script) else self.eos
            if torch.isinf(x[i, target]):  # banned or masked: take the best allowed token instead
                target = int(x[i].argmax())
            out[i, target] = 0.0
        return out


def role_scripts(tree: Tree, fmt: str, tok) -> dict[tuple, list[int]]:
    """Split a canonical (gap-free) trace into what each executed request emits, keyed by role."""
    spec = resolve_spec(fmt)
    out: dict[tuple, str] = {}

    def walk(nodes, role: tuple) -> str:
        text, forks = "", 0
        for node in nodes:
            if isinstance(node, str):
                text += node
                continue
            if spec.is_parason:
                entries = "".join((spec.subtask_open + b.outline + spec.subtask_close) if b.kind == SUBTASK
                                  else (spec.trial_open + b.outline + spec.trial_close) for b in node.branches)
                text += spec.parallel_open + spec.outlines_open + entries + spec.outlines_close
                for k, b in enumerate(node.branches):
                    out[role + (forks, k)] = spec.thread_open + walk(b.body, role + (forks, k)) + spec.thread_close
                text += spec.parallel_close
            else:
                text += spec.parallel_open
                for k, b in enumerate(node.branches):
                    out[role + (forks, k)] = spec.path_open + "".join(b.body) + spec.path_close
                summary = spec.summary_open + node.summary + spec.summary_close
                after = (node.placement or spec.summary_placement) == "after"
                text += spec.parallel_close + summary if after else summary + spec.parallel_close
            forks += 1
        return text

    out[()] = walk(tree.nodes, ())
    return {role: tok.encode(text, add_special_tokens=False) for role, text in out.items()}


def sequential_script(tree: Tree, fmt: str, tok) -> dict[tuple, list[int]]:
    """The whole trace as the script of the one sequential request."""
    return {(): tok.encode(render(tree, fmt), add_special_tokens=False)}
