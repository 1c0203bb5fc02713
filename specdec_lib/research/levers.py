"""Speed levers measured side by side, in one process: a target pass over ``n = 1..n_max`` tokens
and a draft step, with the linear weights as loaded and prepacked for oneDNN
(:func:`~specdec_lib.lm.pack_linears`), in each dtype asked for.

``python -m specdec_lib.research.levers --dtype bfloat16 float32 --out FILE``. The two variants
are timed in alternating blocks (plain, packed, packed, plain), each block in interleaved rounds
(:func:`~specdec_lib.bench.measure_pass_costs`), and a pass's cost is the mean of its two block
medians, so that a drift of the machine during the run falls on both alike. The CPU's instruction
sets can be limited for a run (``ATEN_CPU_CAPABILITY``, ``ONEDNN_MAX_CPU_ISA``,
``MKL_ENABLE_INSTRUCTIONS``, set before Python starts): the run records them, and such a run
imitates an older CPU's kernels on this machine's memory, not that CPU.

``--lever library`` measures the library's bfloat16 product (:mod:`~specdec_lib.research.speed.kernels`)
against oneDNN's: ``bench``'s pair in bfloat16 with the draft the defaults run in it, the target's
passes over ``n = 1..n_max`` tokens and the draft's proposals with the linear layers on the
library's product and on oneDNN's (prepacked where oneDNN packs bfloat16, as loaded where it does
not), in alternating blocks as for packing (:func:`library_costs`).

``--lever support`` measures the host's work instead: the same decoder and draft, decoding the
same prompts in alternation, with the draft's token subset named (``q`` kept on it from the
proposal on, alternatives drawn and verified on it, :func:`~specdec_lib.trees.support_stage`) and
hidden (``q`` and the alternatives over the whole vocabulary).
Both are exact; what differs is the host's time per step.

``--lever attention`` measures the attention of decoding's passes: the target's passes over
``n = 1..`` tokens (each a pass of the default tree, as decoding checks it) and the draft's
proposals, with :func:`~specdec_lib.lm.decode_attention` (taking passes of up to 16 tokens, where
decoding gives it those of :func:`~specdec_lib.lm.decode_queries`) and with transformers'
``sdpa``, at each context of ``--contexts``, in alternating blocks as for packing, with
``bench``'s pair in each dtype of ``--dtype`` (prepacked, with the draft the defaults run in that
dtype, :func:`bench_draft`).

``--lever cache`` measures the KV cache: the same passes as the attention lever, and each ``K``'s
host work (whose keeping of a path crops the cache), with the cache in buffers written in place
(:class:`~specdec_lib.lm.BufferCache`) and in transformers' ``DynamicCache`` (which concatenates
the whole cache into new tensors at every pass), at each context of ``--contexts``, in alternating
blocks, in each dtype of ``--dtype`` with the draft the defaults run in it. Both sides of every
comparison run the cache :data:`~specdec_lib.lm.BUFFERED_CACHE` names.

``--lever cache-decoding`` measures the same in decoding: ``bench``'s defaults with each cache,
each with its own autoregressive baseline under that cache, decoding the same prompts in rotation
in one process (:func:`cache_decoding_costs`): the tokens per second of both sides and the
speedup.

``--lever tree`` measures the step's shape: ``bench``'s defaults with the default tree and with
the tree tuned on this machine (``bench --tune-tree``), decoding the same prompts in rotation
beside one autoregressive baseline, in one process (:func:`tree_costs`).

``--lever schedule`` measures the draft's length: ``bench``'s defaults (the tuned tree) drafting
``K`` tokens every step, and drafting up to ``K`` and stopping after a draft it was unsure of
(``bench --schedule threshold``), in the same rotation (:func:`schedule_costs`).

``--lever draft-temperature`` measures the draft's temperature: ``bench``'s defaults with the
drafts drawn at the target's temperature (``draft_temperature_scale`` 1) and at each of
``--scales`` times it, decoding the same prompts in rotation beside one autoregressive baseline,
in one process (:func:`draft_temperature_costs`), at the sampled temperatures asked for (greedy
decoding ignores the scale).

``--lever compile`` measures the target's linear layers compiled by ``torch.compile`` (inductor,
max-autotune, its C++ matrix-product template over frozen weights, :func:`compile_linears`) for
passes over two rows or more, one-row passes left to the loaded kernels, one compiled function
per linear layer and then one per MLP block with one for the output layer: ``bench``'s pair in
bfloat16 (prepacked where oneDNN packs it), the target's passes over ``n = 1..n_max`` tokens
eager and compiled, in alternating blocks as for packing, with the time the compilation took.

``--lever compile-decoding`` measures the same in decoding: ``bench``'s speculative cells with
each MLP block and the output layer as loaded and compiled, side by side beside one
autoregressive baseline, in one process (:func:`compile_decoding_costs`), with the tree of
``--tree``.

``--lever head`` measures the draft's weights: ``bench``'s defaults with each head of ``--heads``
(the committed head and its fine-tune by a training-time test, by default), decoding the same
prompts in rotation beside one autoregressive baseline, in one process (:func:`head_costs`).

``--lever draft`` measures the draft itself: ``bench``'s defaults with each draft of ``--drafts``
(the head with int8 weights and with its own, by default), each with its own pass costs,
decoding the same prompts in rotation beside one autoregressive baseline, in one process
(:func:`draft_costs`).
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from .. import lm
from ..bench import BenchSettings, speedup_interval, summarize, tuning
from ..bench.analysis import cell_key, run_tree
from ..bench.passes import measure_pass_costs
from ..bench.run import CellRunner, pass_shapes, timing_context
from ..bench.settings import DEFAULT_TREE, PRESETS, preset_draft, settings_record
from ..bench.tuning import pass_tokens
from ..checks import one_of
from ..config import DEFAULT_HEAD, DEFAULT_PROMPTS
from ..decoding import SpeculativeDecoder
from ..lm import use_decode_attention
from ..models import DRAFTS, check_head, load_pair
from ..results import atomic_write_json, isa_limits, load_prompts, provenance
from .speed.kernels import pairs_here

__all__ = [
    "attention_costs",
    "bench_draft",
    "build_parser",
    "compile_costs",
    "compile_decoding_costs",
    "compile_linears",
    "compiled_agreement",
    "draft_costs",
    "draft_temperature_costs",
    "head_costs",
    "library_costs",
    "packing_costs",
    "side_by_side",
    "support_costs",
    "tree_costs",
    "without_support",
]


def bench_draft(dtype: str, pack: str = "off") -> str:
    """The draft ``bench``'s defaults run with the default pair on a CPU in ``dtype`` with the
    weights packed as ``pack`` says (the default preset's: the head in bfloat16 on the library's
    product, else the int8 head in bfloat16, the head in bfloat16 over another dtype)."""
    return preset_draft("default", PRESETS["default"], "cpu", dtype, pack)


def packing_costs(
    dtype: str, *, n_max: int = 9, context: int = 64, reps: int = 8, pair: str = "default"
) -> dict[str, Any]:
    """The pass costs of ``pair`` in ``dtype`` with plain and with prepacked linear weights
    (``t_target_s`` for n = 1..n_max, ``t_draft_s``), and their ratios packed / plain."""
    draft = bench_draft(dtype) if pair == "default" else None
    pairs = {
        "plain": load_pair(pair, draft=draft, dtype=dtype),
        "packed": load_pair(pair, draft=draft, dtype=dtype, pack=True),
    }
    out: dict[str, Any] = {
        "dtype": dtype,
        "pack_applied": pairs["packed"].notes.get("packed", False),
        "packer": "oneDNN",  # lm.PackedLinear's library, in both dtypes
        "draft": draft or "the pair's first",
    }
    return out | _alternating_blocks(
        "plain",
        "packed",
        lambda v: measure_pass_costs(pairs[v], n_max, context=context, reps=reps),
    )


def library_costs(
    *, n_max: int = 9, context: int = 64, reps: int = 8, pair: str = "default"
) -> dict[str, Any]:
    """The pass costs of ``pair`` in bfloat16 (``t_target_s`` for n = 1..n_max, ``t_draft_s``;
    the default pair with one draft on both sides, the int8 head ``bench``'s defaults run over
    oneDNN's product, so that the products alone differ) with the linear layers on oneDNN's
    product (prepacked where oneDNN packs bfloat16, as loaded where it does not) and on the
    library's (:mod:`~specdec_lib.research.speed.kernels`), and their ratios library / oneDNN
    (``library_over_onednn``)."""
    draft = bench_draft("bfloat16") if pair == "default" else None
    pairs = {
        "onednn": load_pair(pair, draft=draft, dtype="bfloat16", pack=True),
        "library": load_pair(pair, draft=draft, dtype="bfloat16", pack="library"),
    }
    out: dict[str, Any] = {
        "dtype": "bfloat16",
        "draft": draft or "the pair's first",
        "onednn_packed": pairs["onednn"].notes.get("packed", False),
        "library_pairs": pairs_here(),  # AVX512-BF16's way, else AVX2's
    }
    return out | _alternating_blocks(
        "onednn",
        "library",
        lambda v: measure_pass_costs(pairs[v], n_max, context=context, reps=reps),
    )


def _alternating_blocks(
    first: str, second: str, measure: Callable[[str], dict[str, Any]]
) -> dict[str, Any]:
    """Two variants' pass costs, ``measure(variant)`` in alternating blocks (first, second,
    second, first): each variant's :func:`_block_means` with ``t_n_over_t_1``, and the ratios
    ``<second>_over_<first>`` pass by pass."""
    blocks: dict[str, list[dict[str, Any]]] = {first: [], second: []}
    for variant in (first, second, second, first):
        blocks[variant].append(measure(variant))
    out: dict[str, Any] = {}
    for variant, runs in blocks.items():
        out[variant] = _block_means(runs)
        out[variant]["t_n_over_t_1"] = [
            x / out[variant]["t_target_s"][0] for x in out[variant]["t_target_s"]
        ]
    out[f"{second}_over_{first}"] = [
        a / b for a, b in zip(out[second]["t_target_s"], out[first]["t_target_s"], strict=True)
    ]
    return out


def attention_costs(
    pair: Any, contexts: Sequence[int], *, K_max: int = 5, reps: int = 8, queries: int = 16
) -> list[dict[str, Any]]:
    """At each context of ``contexts``, the pass costs of ``pair`` (``t_target_s`` over the
    passes of the default tree at ``K = 1..K_max``, ``t_draft_s``) with
    :func:`~specdec_lib.lm.decode_attention` taking passes of up to ``queries`` new tokens
    (decoding's :func:`~specdec_lib.lm.decode_queries` for the dtype) and with transformers'
    ``sdpa`` in both models, in alternating blocks (sdpa, decode, decode, sdpa), and their ratios
    decode / sdpa: where the products pay, pass size by pass size."""
    trees = {K: DEFAULT_TREE for K in range(1, K_max + 1)}
    shapes = pass_shapes(trees)
    n_max = max(shapes)
    draft = getattr(pair.draft, "head", pair.draft)  # a feature drafter's head, or a model
    modules = [m for m in (pair.target, draft) if isinstance(m, torch.nn.Module)]
    loaded = getattr(pair, "notes", {}).get("attention") == lm.DECODE_ATTENTION
    out = []
    every_dtype = dict.fromkeys(
        (torch.float32, torch.bfloat16, torch.float16), range(1, queries + 1)
    )
    decoding_queries, lm.DECODE_QUERIES = lm.DECODE_QUERIES, every_dtype
    try:
        for context in contexts:
            blocks: dict[str, list[dict[str, Any]]] = {"sdpa": [], "decode": []}
            for variant in ("sdpa", "decode", "decode", "sdpa"):
                for m in modules:
                    use_decode_attention(m, on=variant == "decode")
                blocks[variant].append(
                    measure_pass_costs(pair, n_max, context=context, reps=reps, shapes=shapes)
                )
            rec: dict[str, Any] = {"context": context, "decode_queries": queries}
            rec |= {variant: _block_means(runs) for variant, runs in blocks.items()}
            rec["decode_over_sdpa"] = [
                a / b
                for a, b in zip(rec["decode"]["t_target_s"], rec["sdpa"]["t_target_s"], strict=True)
            ]
            out.append(rec)
    finally:  # the pair as loaded
        lm.DECODE_QUERIES = decoding_queries
        for m in modules:
            use_decode_attention(m, on=loaded)
    return out


def cache_costs(
    pair: Any, contexts: Sequence[int], *, K_max: int = 5, reps: int = 8
) -> list[dict[str, Any]]:
    """At each context of ``contexts``, the pass costs of ``pair`` (``t_target_s`` over the
    passes of the default tree at ``K = 1..K_max``, ``t_draft_s``) and each ``K``'s host work
    (``t_host_s``; ``"0"``, the baseline's draw) with the KV cache in transformers'
    ``DynamicCache`` and in :class:`~specdec_lib.lm.BufferCache`, in alternating blocks (dynamic,
    buffer, buffer, dynamic), and the ratios buffer / dynamic, pass size by pass size."""
    trees = {K: DEFAULT_TREE for K in range(1, K_max + 1)}
    shapes = pass_shapes(trees)
    n_max = max(shapes)
    buffered = lm.BUFFERED_CACHE
    out = []
    try:
        for context in contexts:

            def measure(variant: str, context: int = context) -> dict[str, Any]:
                lm.BUFFERED_CACHE = variant == "buffer"
                return measure_pass_costs(
                    pair, n_max, context=context, reps=reps, shapes=shapes, trees=trees
                )

            out.append({"context": context} | _alternating_blocks("dynamic", "buffer", measure))
    finally:
        lm.BUFFERED_CACHE = buffered
    return out


class _Route:
    """A linear layer's ``forward``: passes over ``min_rows`` rows or more to ``compiled`` while
    ``on``, the others (and every pass while off) to the layer's own ``eager`` forward."""

    def __init__(self, eager: Callable, compiled: Callable, min_rows: int) -> None:
        self.eager, self.compiled, self.min_rows, self.on = eager, compiled, min_rows, True

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self.on and x.numel() >= self.min_rows * x.shape[-1]:
            return self.compiled(x)
        return self.eager(x)


@dataclasses.dataclass
class CompiledLinears:
    """What :func:`compile_linears` installed: ``switch(on)`` routes the layers' passes over
    several rows to their compiled products or back to the loaded kernels; ``remove()`` restores
    the layers as they were."""

    routes: list[tuple[torch.nn.Module, _Route]]
    compile_s: float

    def switch(self, on: bool) -> None:
        for _, route in self.routes:
            route.on = on

    def remove(self) -> None:
        for m, _ in self.routes:
            del m.forward


# inductor's options for the compiled products: autotuned among its C++ template (a blocked
# micro-kernel over the weights, prepacked at compile time) and ATen's own product.
COMPILE_OPTIONS = {"max_autotune": True, "max_autotune_gemm_backends": "CPP,ATEN"}


# The units compile_linears can compile, each its own function: every linear layer, or each
# decoder layer's MLP block (its three products and the gate between them) and the output layer.
COMPILE_UNITS = ("linears", "mlp+head")


def _compile_units(model: torch.nn.Module, units: str) -> list[torch.nn.Module]:
    if units == "linears":
        return [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    layers = model.get_decoder().layers  # a transformers decoder-only model
    mlps = [layer.mlp for layer in layers if hasattr(layer, "mlp")]
    if not mlps:
        raise ValueError(f"units={units!r}: the model's decoder layers have no .mlp")
    return [*mlps, model.get_output_embeddings()]


def compile_linears(
    model: torch.nn.Module, min_rows: int = 2, units: str = "linears"
) -> CompiledLinears:
    """Route the passes of ``model``'s linear layers over ``min_rows`` rows or more through
    ``torch.compile`` (inductor, :data:`COMPILE_OPTIONS`) with the weights frozen into the
    compiled code, compiled now, for any row count from ``min_rows`` up (a pass over fewer rows
    runs the loaded kernels, as a prepacked float32 layer keeps the matrix-vector kernel for one
    row: another rounding of the same model). ``units`` (:data:`COMPILE_UNITS`) says what one
    compiled function covers: each linear layer, or each decoder layer's MLP block and the output
    layer (the other layers then run as loaded).

    Each unit gets a function of its own: ``torch.compile`` keeps its compiled graphs per
    function, and checks every graph kept for a function on every call, so one function shared
    by the model's 200-odd layers would be checked against hundreds of graphs per call. Inductor
    freezes weights only with its global ``freezing`` setting, which is set while compiling and
    restored after; a pass that needed a new graph later would compile it unfrozen. Inductor's
    caches of compiled graphs are off while compiling: with them on, a run with the kernels
    limited to AVX2 (bfloat16 weights not prepacked) after runs without the limit got compiled
    units whose logits had nothing to do with the target's (a total-variation distance near 1;
    near 0.06 with the caches off, another rounding), the cause not established further.
    :func:`compiled_agreement` checks every install."""
    from torch._functorch import config as functorch_config
    from torch._inductor import config as inductor_config

    one_of(units, "units", COMPILE_UNITS)
    modules = _compile_units(model, units)
    routes = []
    for i, m in enumerate(modules):
        scope = {"loaded": m.forward}
        source = "def forward(x):\n    return loaded(x)\n"
        exec(compile(source, f"<compiled unit {i}>", "exec"), scope)  # a code object each
        compiled = torch.compile(scope["forward"], options=COMPILE_OPTIONS)
        routes.append((m, _Route(m.forward, compiled, min_rows)))
    t0 = time.perf_counter()
    with (
        inductor_config.patch(freezing=True, fx_graph_cache=False),
        functorch_config.patch(enable_autograd_cache=False),
        torch.inference_mode(),
    ):
        for m, route in routes:
            w = next(m.parameters())
            width = w.shape[1] if isinstance(m, torch.nn.Linear) else model.config.hidden_size
            for rows in (min_rows, min_rows + 1):  # the second marks the row count dynamic
                route.compiled(torch.zeros(1, rows, width, dtype=w.dtype, device=w.device))
    for m, route in routes:
        m.forward = route
    return CompiledLinears(routes, time.perf_counter() - t0)


def compiled_agreement(model: torch.nn.Module, installed: CompiledLinears, n: int = 8) -> float:
    """The largest total-variation distance between the next-token laws of one pass over ``n``
    tokens (seeded random ids, no cache) with ``installed``'s units compiled and as loaded:
    another rounding of the same model gives a small one, a wrong compiled unit a large one."""
    g = torch.Generator().manual_seed(0)
    vocab = model.config.vocab_size
    ids = torch.randint(min(100, vocab // 2), vocab, (1, n), generator=g)
    with torch.inference_mode():
        laws = []
        for on in (False, True):
            installed.switch(on)
            laws.append(torch.softmax(model(ids.to(model.device)).logits.float(), dim=-1))
    return float(0.5 * (laws[0] - laws[1]).abs().sum(-1).max())


def compile_costs(
    pair: Any,
    *,
    n_max: int = 12,
    context: int = 64,
    reps: int = 8,
    units: Sequence[str] = COMPILE_UNITS,
) -> dict[str, Any]:
    """For each of ``units`` (:data:`COMPILE_UNITS`), the target's pass costs (``t_target_s``
    for n = 1..n_max, ``t_draft_s``) with its layers as loaded (eager) and with those units
    compiled (:func:`compile_linears`), in alternating blocks (eager, compiled, compiled, eager),
    their ratios compiled / eager, and the compilation's seconds: one record per unit."""
    out = []
    for unit in units:
        installed = compile_linears(pair.target, units=unit)

        def measure(variant: str, installed: CompiledLinears = installed) -> dict[str, Any]:
            installed.switch(variant == "compiled")
            return measure_pass_costs(pair, n_max, context=context, reps=reps)

        try:
            agreement = compiled_agreement(pair.target, installed)
            timed = _alternating_blocks("eager", "compiled", measure)
        finally:
            installed.remove()
        rec: dict[str, Any] = {
            "units": unit,
            "compiled_units": len(installed.routes),
            "compile_s": installed.compile_s,
            "max_tv_compiled_vs_loaded": agreement,
            "options": COMPILE_OPTIONS | {"freezing": True, "min_rows": 2},
            "packed": getattr(pair, "notes", {}).get("packed", False),
        }
        out.append(rec | timed)
    return out


def _block_means(runs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """A variant's pass costs from its two blocks (:func:`measure_pass_costs` each): the mean of
    the two blocks' medians, so that a drift of the machine during the run falls on both
    variants alike."""
    n = len(runs[0]["t_target_s"])
    out = {
        "t_target_s": [sum(r["t_target_s"][i] for r in runs) / len(runs) for i in range(n)],
        "t_draft_s": sum(r["t_draft_s"] for r in runs) / len(runs),
        "t_draft_next_s": sum(r["t_draft_next_s"] for r in runs) / len(runs),
    }
    if "t_host_s" in runs[0]:  # each K's host work, where the blocks timed it
        out["t_host_s"] = {
            K: sum(r["t_host_s"][K] for r in runs) / len(runs) for K in runs[0]["t_host_s"]
        }
    return out


def without_support(drafter: Any) -> Any:
    """A copy of ``drafter`` (reset) whose token subset is hidden (``support`` is ``None``): it
    then returns ``q`` over the whole vocabulary, and the decoder draws and verifies the
    alternatives there."""
    hidden = type(f"{type(drafter).__name__}WithoutSupport", (type(drafter),), {"support": None})
    out = copy.copy(drafter)
    out.__class__ = hidden
    out.reset()
    return out


def support_costs(
    pair: Any,
    prompts: Sequence[torch.Tensor],
    *,
    K: int = 2,
    tree: Sequence[int] = (4, 3),
    temperature: float = 1.0,
    max_new_tokens: int = 50,
) -> dict[str, Any]:
    """Each prompt (token ids) decoded by ``pair``'s draft with its token subset named and hidden
    (:func:`without_support`), in alternating order from prompt to prompt after one warm-up each;
    per variant, the medians over prompts of the host's, the draft's and the target's
    milliseconds per step, and the tokens per second over all prompts."""
    drafters = {"support": pair.draft, "whole vocabulary": without_support(pair.draft)}
    decoders = {
        name: SpeculativeDecoder(d, pair.target, K=K, tree=tree, temperature=temperature)
        for name, d in drafters.items()
    }
    for dec in decoders.values():
        dec.generate_ids(prompts[0], 4, seed=0)
    rows: dict[str, list[dict[str, float]]] = {name: [] for name in decoders}
    for i, ids in enumerate(prompts):
        for name in list(decoders) if i % 2 == 0 else list(decoders)[::-1]:
            r = decoders[name].generate_ids(ids, max_new_tokens, seed=i)
            per_step = {
                f"{part}_ms": sum(getattr(st, f"{part}_ms") for st in r.steps) / r.n_steps
                for part in ("host", "draft", "target")
            }
            rows[name].append(per_step | {"tokens": len(r.tokens), "elapsed_s": r.elapsed_s})
    out: dict[str, Any] = {"K": K, "tree": list(tree), "temperature": temperature}
    for name, rs in rows.items():
        out[name] = {
            f"{part}_ms_per_step": statistics.median(r[f"{part}_ms"] for r in rs)
            for part in ("host", "draft", "target")
        } | {"tokens_per_s": sum(r["tokens"] for r in rs) / sum(r["elapsed_s"] for r in rs)}
    return out


def _run_costs(
    pair: Any, settings: BenchSettings, prompts: Sequence[dict[str, Any]]
) -> dict[str, Any]:
    """The pass costs a lever's run times once, before its cells: target passes up to the
    largest a tuned step at the run's longest ``K`` can make, and every proposal length up to
    that ``K``, at the context ``bench`` would time them at (:func:`timing_context`)."""
    lengths = [pair.tokenizer(p["text"], return_tensors="pt").input_ids.shape[-1] for p in prompts]
    return measure_pass_costs(
        pair,
        pass_tokens(max(settings.K)),
        k_max=max(settings.K),
        context=timing_context(settings, lengths),
        reps=settings.cost_reps,
    )


def _tuned_run(
    pair: Any, settings: BenchSettings, prompts: Sequence[dict[str, Any]]
) -> tuple[dict[str, Any], dict[str, Any], dict[int, tuple[int, ...]]]:
    """A tuned lever's start: the pass costs timed once (:func:`_run_costs`), the trees tuned
    from them for ``settings`` (:func:`~specdec_lib.bench.tuning.tune`), and each ``K``'s
    shape."""
    costs = _run_costs(pair, settings, prompts)
    tuned = tuning.tune(pair, settings, costs)
    return costs, tuned, {K: tuple(run_tree({}, tuned, K)) for K in settings.K}


def tree_costs(
    pair: Any, settings: BenchSettings, prompts: Sequence[dict[str, Any]]
) -> dict[str, Any]:
    """The default tree against the tree tuned on this machine, side by side in one process.

    ``settings`` (validated, with its fixed ``tree``) says what ``bench`` runs; ``pair`` is what
    it loads. The pass costs are timed once, up to the largest pass a tuned step can make; the
    tuned shape of each ``K`` comes from them and the head's tree rates
    (:func:`~specdec_lib.bench.tuning.tuned_trees`). Then the two shapes decode the prompts
    beside one autoregressive baseline (:func:`side_by_side`)."""
    costs, tuned, trees = _tuned_run(pair, settings, prompts)
    variants = {
        "fixed": (pair, settings, None),
        "tuned": (pair, dataclasses.replace(settings, tree=None, tune_tree=True), trees),
    }
    out = side_by_side(variants, prompts, costs, {"tuned": {"tuned_trees": tuned}})
    return out | {"fixed_tree": list(settings.tree)}


def schedule_costs(
    pair: Any, settings: BenchSettings, prompts: Sequence[dict[str, Any]]
) -> dict[str, Any]:
    """A draft of ``K`` tokens every step against one that stops by confidence, up to ``K``
    (``bench --schedule threshold``, at ``settings.threshold``), side by side in one process,
    both with the tree tuned on this machine at each ``K`` for a draft of ``K`` tokens every step
    (:func:`tree_costs` times and tunes it the same way), so that the schedule alone differs."""
    costs, tuned, trees = _tuned_run(pair, settings, prompts)
    variants = {
        name: (
            pair,
            dataclasses.replace(settings, tree=None, tune_tree=True, schedule=name),
            trees,
        )
        for name in ("fixed", "threshold")
    }
    extra = {name: {"tuned_trees": tuned} for name in variants}
    return side_by_side(variants, prompts, costs, extra) | {"threshold": settings.threshold}


def head_costs(
    pairs: dict[str, Any], settings: BenchSettings, prompts: Sequence[dict[str, Any]]
) -> dict[str, Any]:
    """Trained heads against each other, side by side in one process: ``pairs`` maps a name to
    the pair loaded with that head (one target: ``load_pair`` shares it), ``settings`` says
    what ``bench`` runs, the same shape for every head. The pass costs are timed once, on the
    first pair (the heads share one architecture); each head's record names its weights
    (``head``, ``head_sha256``)."""
    costs = _run_costs(next(iter(pairs.values())), settings, prompts)
    variants = {
        name: (p, dataclasses.replace(settings, head=p.notes.get("head_path")), None)
        for name, p in pairs.items()
    }
    heads = {
        name: {"head": p.notes.get("head_path"), "head_sha256": p.notes.get("head_sha256")}
        for name, p in pairs.items()
    }
    out = side_by_side(variants, prompts, costs, heads)
    return out | {"tree": list(settings.tree), "heads": heads}


def draft_costs(
    pairs: dict[str, Any], settings: BenchSettings, prompts: Sequence[dict[str, Any]]
) -> dict[str, Any]:
    """Drafts against each other, side by side in one process: ``pairs`` maps a draft's name
    (:data:`~specdec_lib.models.DRAFTS`) to the pair loaded with it (one target: ``load_pair``
    shares it), ``settings`` says what ``bench`` runs, the same shape for every draft. Each
    variant's pass costs are timed on its own pair, so that the cost model reads its own draft
    step; the first variant's pair decodes the autoregressive baseline."""
    costs = {d: _run_costs(p, settings, prompts) for d, p in pairs.items()}
    variants = {d: (p, dataclasses.replace(settings, draft=d), None) for d, p in pairs.items()}
    extra = {d: {"costs": costs[d]} for d in pairs}
    out = side_by_side(variants, prompts, costs[next(iter(pairs))], extra)
    return out | {"tree": list(settings.tree), "drafts": list(pairs)}


def draft_temperature_costs(
    pair: Any,
    settings: BenchSettings,
    prompts: Sequence[dict[str, Any]],
    scales: Sequence[float] = (0.8,),
) -> dict[str, Any]:
    """The drafts drawn at ``settings``' temperature scale and at each of ``scales``, side by side
    in one process: the same pair, tree and ``K`` list, the pass costs timed once, the variants
    decoding the prompts beside one autoregressive baseline (:func:`side_by_side`), each named
    ``scale <s>`` (``settings``' first)."""
    costs = _run_costs(pair, settings, prompts)
    variants = {
        f"scale {sc:g}": (pair, dataclasses.replace(settings, draft_temperature_scale=sc), None)
        for sc in dict.fromkeys([settings.draft_temperature_scale, *scales])
    }
    out = side_by_side(variants, prompts, costs)
    return out | {"tree": list(settings.tree), "scales": list(variants)}


def compile_decoding_costs(
    pair: Any, settings: BenchSettings, prompts: Sequence[dict[str, Any]], units: str = "mlp+head"
) -> dict[str, Any]:
    """``bench``'s speculative cells with the target's ``units`` as loaded and compiled
    (:func:`compile_linears`), side by side beside one autoregressive baseline (as loaded), in
    one process (:func:`side_by_side`); each variant's pass costs timed with its own layers, so
    that the cost model reads what each runs."""
    installed = compile_linears(pair.target, units=units)
    try:
        agreement = compiled_agreement(pair.target, installed)
        costs = {}
        for name, on in (("as loaded", False), ("compiled", True)):
            installed.switch(on)
            costs[name] = _run_costs(pair, settings, prompts)
        variants = {
            name: (pair, settings, None, lambda on=on: installed.switch(on))
            for name, on in (("as loaded", False), ("compiled", True))
        }
        extra = {
            name: {"costs": costs[name], "compiled": {"units": units, "on": name == "compiled"}}
            for name in variants
        }
        out = side_by_side(variants, prompts, costs["as loaded"], extra)
    finally:
        installed.remove()
    return out | {
        "tree": list(settings.tree),
        "units": units,
        "compile_s": installed.compile_s,
        "max_tv_compiled_vs_loaded": agreement,
    }


def cache_decoding_costs(
    pair: Any, settings: BenchSettings, prompts: Sequence[dict[str, Any]]
) -> dict[str, Any]:
    """``bench``'s cells with the KV cache in transformers' ``DynamicCache`` and in
    :class:`~specdec_lib.lm.BufferCache`, side by side in one process, each with its own
    autoregressive baseline under the same cache (the cache is both sides' lever): what it
    changes in the tokens per second of each side and in the speedup. The pass costs are timed
    once, with the cache :data:`~specdec_lib.lm.BUFFERED_CACHE` names."""
    buffered = lm.BUFFERED_CACHE

    def use(on: bool) -> Callable[[], None]:
        return lambda: setattr(lm, "BUFFERED_CACHE", on)

    try:
        costs = _run_costs(pair, settings, prompts)
        variants = {
            "dynamic": (pair, settings, None, use(False)),
            "buffer": (pair, settings, None, use(True)),
        }
        out = side_by_side(variants, prompts, costs, own_baselines=True)
    finally:
        lm.BUFFERED_CACHE = buffered
    return out | {"tree": list(settings.tree)}


def side_by_side(
    variants: dict[str, tuple[Any, BenchSettings, Any]],
    prompts: Sequence[dict[str, Any]],
    costs: dict[str, Any],
    extra: dict[str, dict[str, Any]] | None = None,
    own_baselines: bool = False,
) -> dict[str, Any]:
    """Variants of ``bench``'s speculative cells decoding the same prompts beside one
    autoregressive baseline, in one process.

    ``variants`` maps a name to ``(pair, settings, trees)`` (:class:`~specdec_lib.bench.run.CellRunner`'s
    arguments; the pairs share one target, the settings one ``K`` list, temperature and seed),
    optionally with a fourth element, a function called before each of the variant's cells
    (the baseline's cells are the first variant's).
    The first variant's runner decodes the baseline. Each prompt is decoded by the baseline and
    by every variant at each ``K``, in an order rotated from prompt to prompt, as ``bench``
    orders its cells, after one short warm-up of each. The variants share the baseline's cells:
    each is stored as a ``bench`` run (``results``, with ``extra[name]``'s fields) and summarised
    as one, with the speedup's 95% bootstrap interval over prompts (``by_K``). With
    ``own_baselines`` each variant decodes its own baseline instead, after its own set-up (a
    lever of both sides), and ``baselines`` gives each one's tokens per second."""
    setups = {v: (spec[3] if len(spec) > 3 else None) for v, spec in variants.items()}
    variants = {v: spec[:3] for v, spec in variants.items()}
    first = next(iter(variants))
    pair, settings, _ = variants[first]
    runners = {v: CellRunner(p, s, trees=t) for v, (p, s, t) in variants.items()}

    def set_up(v: str) -> None:
        if setups[v] is not None:
            setups[v]()

    configs = [(v, "autoregressive", 0) for v in (variants if own_baselines else [first])]
    configs += [(v, "speculative", K) for K in settings.K for v in variants]
    ids = [pair.tokenizer(p["text"], return_tensors="pt").input_ids[0] for p in prompts]
    for v, method, K in configs:  # warm-up, not recorded
        p, s, t = variants[v]
        set_up(v)
        CellRunner(p, dataclasses.replace(s, max_new_tokens=4), trees=t).run(
            method, K, ids[0], seed=0
        )
    cells: dict[str, dict[str, Any]] = {v: {} for v in variants}
    for i, prompt_ids in enumerate(ids):
        shift = i % len(configs)
        for v, method, K in configs[shift:] + configs[:shift]:
            set_up(v)
            cell = runners[v].run(method, K, prompt_ids, seed=settings.seed * 1_000_003 + i)
            for w in variants if method == "autoregressive" and not own_baselines else [v]:
                cells[w][cell_key(method, K, i, 0)] = cell
    results, by_K = {}, {K: {"K": K} for K in settings.K}
    for v, (_, s, _) in variants.items():
        res = {
            "settings": settings_record(s),
            "prompts": list(prompts),
            "costs": costs,
            "tuned_trees": None,
            **(extra or {}).get(v, {}),
            "cells": cells[v],
        }
        res["runs"] = summarize(res)
        results[v] = res
        for r in res["runs"]:
            if r["method"] != "speculative":
                continue
            low, high = speedup_interval(res, "speculative", r["K"])
            by_K[r["K"]][v] = {
                k: r.get(k)
                for k in (
                    "tree",
                    "speedup",
                    "tokens_per_s",
                    "predicted_speedup",
                    "efficiency",
                    "predicted_speedup_cells",
                    "efficiency_cells",
                    "tau",
                    "alpha_by_position",
                )
            } | {"low": low, "high": high, "host_share": r.get("host_share")}
    base = {
        v: next(r for r in res["runs"] if r["method"] == "autoregressive")["tokens_per_s"]
        for v, res in results.items()
    }
    return {
        "temperature": settings.temperature,
        "K": list(settings.K),
        "baseline_tokens_per_s": base[first],
        **({"baselines": base} if own_baselines else {}),
        "by_K": list(by_K.values()),
        "results": results,
    }


def build_parser() -> argparse.ArgumentParser:
    """The command line of ``python -m specdec_lib.research.levers`` (the campaign's plan runs
    it, and its tests parse the plan's runs with it)."""
    p = argparse.ArgumentParser(
        prog="python -m specdec_lib.research.levers", description=__doc__.split("\n\n")[0]
    )
    p.add_argument(
        "--lever",
        choices=[
            "packing",
            "library",
            "attention",
            "cache",
            "cache-decoding",
            "support",
            "tree",
            "schedule",
            "head",
            "draft",
            "draft-temperature",
            "compile",
            "compile-decoding",
        ],
        default="packing",
    )
    p.add_argument("--dtype", nargs="+", default=["bfloat16", "float32"])
    p.add_argument("--n-max", type=int, default=9, help="passes over n = 1..n_max tokens")
    p.add_argument("--reps", type=int, default=8, help="rounds per block (four blocks)")
    p.add_argument("--context", type=int, default=64, help="tokens in the cache")
    p.add_argument(
        "--contexts",
        type=int,
        nargs="+",
        default=[64, 300, 1000],
        help="attention, cache: the contexts (tokens in the cache) timed",
    )
    p.add_argument(
        "--temperature",
        type=float,
        nargs="+",
        default=[1.0, 0.0],
        help="support, tree, schedule, head, draft-temperature: temperatures (0 = greedy)",
    )
    p.add_argument(
        "--prompts",
        type=int,
        default=10,
        help="support, tree, schedule, head, draft-temperature: benchmark prompts decoded (the "
        "first N of data/prompts.json)",
    )
    p.add_argument(
        "--scales",
        type=float,
        nargs="+",
        default=[0.8],
        help="draft-temperature: the scales measured beside 1 (the target's temperature)",
    )
    p.add_argument(
        "--K", type=int, nargs="+", default=[1, 2, 3], help="tree, schedule, head: draft lengths"
    )
    p.add_argument(
        "--heads",
        nargs="+",
        default=[str(DEFAULT_HEAD), "data/drafter/feature_head_ttt_full.safetensors"],
        help="head: saved weights of the trained heads compared",
    )
    p.add_argument(
        "--drafts",
        nargs="+",
        default=["trained-int8", "trained"],
        choices=DRAFTS,
        help="draft: the drafts compared (the first decodes the baseline)",
    )
    p.add_argument(
        "--tree",
        type=int,
        nargs="+",
        default=None,
        help="compile-decoding: the step's shape (default: bench's)",
    )
    p.add_argument("--out", required=True, help="the JSON file to write")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    settings = {k: v for k, v in vars(args).items() if k != "out"}
    mains = {
        "attention": _attention_main,
        "cache": _cache_main,
        "cache-decoding": _cache_decoding_main,
        "support": _support_main,
        "tree": _tree_main,
        "schedule": _schedule_main,
        "head": _head_main,
        "draft": _draft_main,
        "draft-temperature": _draft_temperature_main,
        "compile": _compile_main,
        "compile-decoding": _compile_decoding_main,
    }
    if args.lever in mains:
        return mains[args.lever](args, settings)
    if args.lever == "library":
        runs = [library_costs(n_max=args.n_max, context=args.context, reps=args.reps)]
    else:
        runs = [
            packing_costs(d, n_max=args.n_max, context=args.context, reps=args.reps)
            for d in args.dtype
        ]
    result = {
        "runs": runs,
        "isa_limits": isa_limits(),
        "provenance": provenance(seed=0, settings=settings),
    }
    atomic_write_json(args.out, result)
    key, name = (
        ("library_over_onednn", "library / oneDNN")
        if args.lever == "library"
        else ("packed_over_plain", "packed / plain")
    )
    for r in result["runs"]:
        print(r["dtype"], f"{name}:", " ".join(f"{x:.2f}" for x in r[key]))
    return 0


def _by_dtype_main(
    args: argparse.Namespace,
    settings: dict[str, Any],
    costs: Callable[..., list[dict[str, Any]]],
    report: Callable[[dict[str, Any]], None],
) -> int:
    """A lever timed at each context of ``--contexts`` on bench's pair in each dtype of
    ``--dtype``, packed, with the draft the defaults run in it (the int8 head in bfloat16, the
    head in bfloat16 over float32): ``costs(pair, contexts, reps=...)``'s records, each printed by
    ``report``."""
    runs = []
    for dtype in args.dtype:
        draft = bench_draft(dtype)
        pair = load_pair("default", draft=draft, dtype=dtype, pack=True)
        runs += [
            {"dtype": dtype, "draft": draft} | r for r in costs(pair, args.contexts, reps=args.reps)
        ]
    result = {
        "runs": runs,
        "isa_limits": isa_limits(),
        "provenance": provenance(seed=0, settings=settings),
    }
    atomic_write_json(args.out, result)
    for r in result["runs"]:
        report(r)
    return 0


def _attention_main(args: argparse.Namespace, settings: dict[str, Any]) -> int:
    """The attention lever, decode_attention against sdpa."""

    def report(r: dict[str, Any]) -> None:
        ratios = " ".join(f"{x:.2f}" for x in r["decode_over_sdpa"])
        print(f"{r['dtype']}, context {r['context']}: decode / sdpa by pass size:", ratios)

    return _by_dtype_main(args, settings, attention_costs, report)


def _cache_main(args: argparse.Namespace, settings: dict[str, Any]) -> int:
    """The cache lever, BufferCache against DynamicCache."""

    def report(r: dict[str, Any]) -> None:
        ratios = " ".join(f"{x:.3f}" for x in r["buffer_over_dynamic"])
        host = " ".join(
            f"{r['buffer']['t_host_s'][k] * 1e3:.2f}/{r['dynamic']['t_host_s'][k] * 1e3:.2f}"
            for k in r["buffer"]["t_host_s"]
        )
        print(f"{r['dtype']}, context {r['context']}: buffer / dynamic by pass size:", ratios)
        print(f"  host ms buffer/dynamic by K (0: the baseline): {host}")

    return _by_dtype_main(args, settings, cache_costs, report)


def _compile_main(args: argparse.Namespace, settings: dict[str, Any]) -> int:
    """The compile lever on bench's pair in bfloat16: the int8 head, prepacked where oneDNN packs
    bfloat16 on this CPU."""
    pair = load_pair("default", draft="trained-int8", dtype="bfloat16", pack=True)
    result = {
        "runs": compile_costs(pair, n_max=args.n_max, context=args.context, reps=args.reps),
        "isa_limits": isa_limits(),
        "provenance": provenance(device="cpu", seed=0, settings=settings),
    }
    atomic_write_json(args.out, result)
    for r in result["runs"]:
        print(f"{r['units']}: compiled {r['compiled_units']} units in {r['compile_s']:.0f} s")
        for variant in ("eager", "compiled"):
            ms = " ".join(f"{1e3 * x:.1f}" for x in r[variant]["t_target_s"])
            print(f"  {variant}: t(n) ms, n = 1..{len(r[variant]['t_target_s'])}: {ms}")
        print("  compiled / eager:", " ".join(f"{x:.2f}" for x in r["compiled_over_eager"]))
    return 0


def _support_main(args: argparse.Namespace, settings: dict[str, Any]) -> int:
    """The host-work lever on the default pair, its int8 head in bfloat16, packed."""
    pair = load_pair("default", draft="trained-int8", dtype="bfloat16", pack=True)
    texts = [p["text"] for p in load_prompts(DEFAULT_PROMPTS)][: args.prompts]
    prompts = [pair.tokenizer(t, return_tensors="pt").input_ids[0] for t in texts]
    result = {
        "runs": [support_costs(pair, prompts, temperature=t) for t in args.temperature],
        "provenance": provenance(seed=0, settings=settings),
    }
    atomic_write_json(args.out, result)
    for r in result["runs"]:
        host = {k: round(v["host_ms_per_step"], 2) for k, v in r.items() if isinstance(v, dict)}
        print(f"T = {r['temperature']:g}: host ms per step", host)
    return 0


def _tree_main(args: argparse.Namespace, settings: dict[str, Any]) -> int:
    """The shape lever: the default tree and the tuned one."""

    def line(r: dict[str, Any]) -> str:
        f, t = r["fixed"], r["tuned"]
        return (
            f"{tuple(f['tree'])} {f['speedup']:.3f}x, tuned {tuple(t['tree'])} {t['speedup']:.3f}x"
        )

    return _bench_lever_main(args, settings, _load_default_pair, tree_costs, line)


def _schedule_main(args: argparse.Namespace, settings: dict[str, Any]) -> int:
    """The schedule lever: K drafts every step, and up to K stopping by confidence."""

    def line(r: dict[str, Any]) -> str:
        f, t = r["fixed"], r["threshold"]
        return f"fixed {f['speedup']:.3f}x, stopped by confidence {t['speedup']:.3f}x"

    return _bench_lever_main(args, settings, _load_default_pair, schedule_costs, line)


def _head_main(args: argparse.Namespace, settings: dict[str, Any]) -> int:
    """The head lever: each head of ``--heads``, by the stem of its file."""

    def load(s: BenchSettings) -> dict[str, Any]:
        for h in args.heads:
            check_head(h, s.draft)
        return {Path(h).stem: _load_default_pair(s, head=h) for h in args.heads}

    return _bench_lever_main(args, settings, load, head_costs, _variant_speedups)


def _draft_main(args: argparse.Namespace, settings: dict[str, Any]) -> int:
    """The draft lever: each draft of ``--drafts`` with bench's defaults otherwise."""

    def load(s: BenchSettings) -> dict[str, Any]:
        return {d: _load_default_pair(dataclasses.replace(s, draft=d)) for d in args.drafts}

    return _bench_lever_main(args, settings, load, draft_costs, _variant_speedups)


def _cache_decoding_main(args: argparse.Namespace, settings: dict[str, Any]) -> int:
    """The cache lever in decoding: bench's defaults with each cache on both sides."""

    def line(r: dict[str, Any]) -> str:
        return ", ".join(
            f"{v} {r[v]['speedup']:.3f}x ({r[v]['tokens_per_s']:.1f} tokens/s)"
            for v in ("dynamic", "buffer")
        )

    return _bench_lever_main(args, settings, _load_default_pair, cache_decoding_costs, line)


def _compile_decoding_main(args: argparse.Namespace, settings: dict[str, Any]) -> int:
    """The compile lever in decoding: bench's pair in bfloat16 (prepacked where oneDNN packs it),
    the tree of ``--tree``, each MLP block and the output layer compiled."""

    extra = {"dtype": "bfloat16", "pack": "on"} | ({"tree": args.tree} if args.tree else {})
    return _bench_lever_main(
        args, settings, _load_default_pair, compile_decoding_costs, _variant_speedups, extra
    )


def _draft_temperature_main(args: argparse.Namespace, settings: dict[str, Any]) -> int:
    """The draft-temperature lever, at the sampled temperatures of ``--temperature``."""
    args.temperature = [t for t in args.temperature if t > 0]
    if not args.temperature:
        raise SystemExit("--lever draft-temperature: greedy decoding ignores the scale; give T > 0")

    def measure(pair: Any, s: BenchSettings, prompts: Sequence[dict[str, Any]]) -> dict[str, Any]:
        return draft_temperature_costs(pair, s, prompts, args.scales)

    return _bench_lever_main(args, settings, _load_default_pair, measure, _variant_speedups)


def _variant_speedups(r: dict[str, Any]) -> str:
    """A ``K``'s speedups, variant by variant, as the levers decoding side by side print them."""
    return ", ".join(f"{name} {v['speedup']:.3f}x" for name, v in r.items() if name != "K")


def _load_default_pair(s: BenchSettings, head: str | None = None) -> Any:
    """The pair ``bench`` loads for settings ``s`` (its dtype and weight layout resolved)."""
    return load_pair(s.pair, draft=s.draft, dtype=s.dtype, pack=s.pack, head=head)


def _bench_lever_main(
    args: argparse.Namespace,
    settings: dict[str, Any],
    load: Callable[[BenchSettings], Any],
    measure: Callable[[Any, BenchSettings, Sequence[dict[str, Any]]], dict[str, Any]],
    line: Callable[[dict[str, Any]], str],
    extra_settings: dict[str, Any] | None = None,
) -> int:
    """A lever measured with ``bench``'s defaults (the dtype and weight layout timed at start-up)
    but the preset's fixed tree and ``K`` drafts every step (one shape and one length at every
    ``K``, so that the lever alone differs between variants; the tuned tree and the stop by
    confidence are the tree and schedule levers' subjects) at each temperature asked for:
    what ``load`` returns for the first temperature's settings (a pair, or pairs by name) is
    measured at every one, each ``K``'s speedups printed by ``line``."""
    prompts = load_prompts(DEFAULT_PROMPTS)[: args.prompts]
    runs: list[dict[str, Any]] = []
    loaded = None
    for T in args.temperature:
        s = BenchSettings(
            K=args.K,
            temperature=T,
            methods=["autoregressive", "speculative"],
            **({"tune_tree": False, "schedule": "fixed"} | (extra_settings or {})),
        ).validate()
        loaded = load(s) if loaded is None else loaded
        runs.append(measure(loaded, s, prompts))
        for r in runs[-1]["by_K"]:
            print(f"T = {T:g}, K = {r['K']}: {line(r)}")
    result = {
        "runs": runs,
        "isa_limits": isa_limits(),
        "provenance": provenance(device="cpu", seed=0, settings=settings),
    }
    atomic_write_json(args.out, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
