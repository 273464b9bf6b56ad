"""Simulated Axiom events of a Diplomacy GRPO trainer, with known trouble in them, for the demo and for tests.

``write_demo_events`` writes an NDJSON file of the events the trainer sends to Axiom (every event type of
grpo-signals.md §1a with exactly its fields, plus ``_time`` and ``service``): three sweep runs one after another,
rollouts with their order extraction and inference calls, periodic GPU, cache and timing events, and training-step
spans. Three stretches go wrong on purpose and come back as ground truth:

- ``slow_rollouts``: rollouts take about 3x as long (p95 well above 120 s);
- ``error_burst``: about 40% of the rollouts end in ``rollout_error`` (failed spans with them);
- ``extraction_failures``: many ``orders_partial``/``orders_empty`` (full share far below 95%).

``serve_demo_events`` serves such a file from the test suite's Axiom emulator on 127.0.0.1 so the API path can be
run end to end without Axiom (``grpolens demo --axiom-emulator``).
"""

from __future__ import annotations

import importlib.util
import json
import math
import random
import sys
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

from pipeline.settings import PROJECT_ROOT

DATASET = "diplomacy"
POWERS = ("AUSTRIA", "ENGLAND", "FRANCE", "GERMANY", "ITALY", "RUSSIA", "TURKEY")
SERVICES = {"trainer": "diplomacy-grpo-trainer", "rollout": "diplomacy-rollout-worker", "inference": "diplomacy-vllm"}
# Where the trouble is, as fractions of the whole stretch of time.
PERIODS = {"slow_rollouts": (0.25, 0.375), "error_burst": (0.58, 0.625), "extraction_failures": (0.75, 0.875)}
ERRORS = (
    "vLLM request timed out after 300s",
    "CUDA out of memory while generating",
    "game engine: invalid state",
    "connection reset by inference server",
)


def _iso(t: datetime) -> str:
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _in(t: datetime, window: tuple[datetime, datetime]) -> bool:
    return window[0] <= t < window[1]


def _p95(values: list[float]) -> float:
    """The 95th percentile (nearest rank) of a non-empty list."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(0.95 * len(ordered)) - 1)]


def write_demo_events(path: Path, start: datetime, hours: float = 6, seed: int = 7) -> dict:
    """Write the NDJSON file; returns the ground truth: periods, runs, counts and what each period looks like."""
    rng = random.Random(seed)
    if start.tzinfo is None:
        start = start.replace(tzinfo=UTC)
    end = start + timedelta(hours=hours)
    span = end - start
    periods = {name: (start + span * a, start + span * b) for name, (a, b) in PERIODS.items()}
    events: list[tuple[datetime, dict]] = []

    def emit(t: datetime, event: str, service: str, **fields) -> None:
        if start <= t < end:
            events.append((t, {"_time": _iso(t), "event": event, "service": SERVICES[service], **fields}))

    # -- the sweep: three runs one after another, the last one dies near the end
    run_names = ["diplomacy-grpo-sweep-lr1e-5", "diplomacy-grpo-sweep-lr3e-5", "diplomacy-grpo-sweep-lr1e-4"]
    runs = []
    for i, name in enumerate(run_names):
        r_start = start + span * (i / 3) + timedelta(seconds=5)
        r_end = start + span * ((i + 1) / 3) - timedelta(seconds=30 if i < 2 else 600)
        status = "completed" if i < 2 else "failed"
        lr = float(name.rsplit("lr", 1)[1])
        emit(
            r_start,
            "sweep_run_started",
            "trainer",
            run_name=name,
            sweep_name="diplomacy-grpo-sweep",
            run_index=i,
            learning_rate=lr,
        )
        if status == "completed":
            emit(
                r_end,
                "sweep_run_completed",
                "trainer",
                run_name=name,
                sweep_name="diplomacy-grpo-sweep",
                run_index=i,
                duration_s=round((r_end - r_start).total_seconds(), 1),
            )
        else:
            emit(
                r_end,
                "sweep_run_failed",
                "trainer",
                run_name=name,
                sweep_name="diplomacy-grpo-sweep",
                run_index=i,
                error="CUDA out of memory during actor update",
            )
        runs.append(
            {"run_name": name, "start": _iso(r_start), "end": _iso(r_end), "status": status, "learning_rate": lr}
        )

    # -- rollouts
    rollouts: list[dict] = []
    t = start + timedelta(seconds=20)
    n = 0
    while t < end:
        n += 1
        rollout_id = f"rollout-{n:06d}-{rng.getrandbits(24):06x}"
        slow = _in(t, periods["slow_rollouts"])
        burst = _in(t, periods["error_burst"])
        extraction_bad = _in(t, periods["extraction_failures"])
        duration = rng.lognormvariate(math.log(40), 0.35) * (3.2 if slow else 1.0)
        samples = 8
        horizon = rng.choice((1, 2, 2, 3))
        emit(
            t,
            "rollout_start",
            "rollout",
            rollout_id=rollout_id,
            samples_per_group=samples,
            horizon_years=horizon,
            horizon_type=rng.choice(("fixed", "fixed", "random")),
            warmup_phases=2,
        )
        failed = rng.random() < (0.4 if burst else 0.003)
        fail_at = rng.uniform(0.2, 0.9) if failed else 2.0
        calls = 0
        tokens = 0
        statuses: Counter[str] = Counter()
        invalid = over = 0
        phases = [f"{season}{1901 + y}M" for y in range(horizon) for season in "SF"][:2]
        for p_index, phase in enumerate(phases):
            frac = (p_index + 1) / (len(phases) + 1)
            if frac >= fail_at:
                break
            # one batched inference call per phase, answered by the inference server
            batch = len(POWERS)
            gen_ms = rng.lognormvariate(math.log(duration * 1000 / (len(phases) + 2)), 0.2)
            generated = int(rng.gauss(300, 60)) * batch
            hit_rate = min(0.95, max(0.0, rng.gauss(0.68, 0.08)))
            queries = batch
            emit(
                t + timedelta(seconds=duration * frac - 0.5),
                "inference_response",
                "inference",
                batch_size=batch,
                duration_ms=round(gen_ms, 1),
                tokens_generated=generated,
                tokens_per_second=round(generated / (gen_ms / 1000), 1),
                prefix_cache_hit_rate=round(hit_rate, 3),
                prefix_cache_queries=queries,
                prefix_cache_hits=round(queries * hit_rate),
            )
            calls += 1
            tokens += generated
            for power in POWERS:
                expected = rng.choice((3, 4, 5, 6))
                roll = rng.random()
                p_empty, p_partial = (0.2, 0.25) if extraction_bad else (0.008, 0.02)
                if roll < p_empty:
                    status, count, event = "empty", 0, "orders_empty"
                elif roll < p_empty + p_partial:
                    status, count, event = "partial", rng.randint(1, expected - 1), "orders_partial"
                else:
                    status, count, event = "full", expected, "orders_extracted"
                statuses[status] += 1
                extra = {}
                if status != "full":
                    text = "" if status == "empty" else f"A VIE - TRI\nF TRI - ADR\n<think>{power.lower()} should"
                    extra = {"raw_response_preview": text[:200], "raw_response_length": len(text) + rng.randint(0, 900)}
                if status == "full" and rng.random() < 0.01:
                    over += 1
                if rng.random() < 0.02:
                    invalid += 1
                emit(
                    t + timedelta(seconds=duration * frac + rng.uniform(0, 0.4)),
                    event,
                    "rollout",
                    rollout_id=rollout_id,
                    power_name=power,
                    orders_count=count,
                    expected_count=expected,
                    status=status,
                    phase=phase,
                    **extra,
                )
        done = t + timedelta(seconds=duration * (fail_at if failed else 1.0))
        full = statuses["full"]
        total = sum(statuses.values())
        if failed:
            error = rng.choice(ERRORS)
            emit(
                done,
                "rollout_error",
                "rollout",
                rollout_id=rollout_id,
                error=error,
                phase=phases[min(len(phases) - 1, int(fail_at * len(phases)))],
            )
            emit(
                done + timedelta(milliseconds=2),
                "span_duration",
                "rollout",
                span_name="rollout",
                duration_ms=round((done - t).total_seconds() * 1000, 1),
                status="error",
                error=error,
            )
        else:
            emit(
                done - timedelta(milliseconds=5),
                "rollout_metrics",
                "rollout",
                rollout_id=rollout_id,
                duration_ms=round(duration * 1000, 1),
                inference_calls=calls,
                extraction_rate=round(full / total, 4) if total else 0.0,
                empty_responses=statuses["empty"],
                partial_responses=statuses["partial"],
                invalid_orders=invalid,
                over_extracted=over,
            )
            emit(
                done,
                "rollout_complete",
                "rollout",
                rollout_id=rollout_id,
                trajectories_count=samples - (1 if rng.random() < 0.05 else 0),
                total_inference_calls=calls,
                total_duration_ms=round(duration * 1000, 1),
            )
            emit(
                done + timedelta(milliseconds=2),
                "span_duration",
                "rollout",
                span_name="rollout",
                duration_ms=round(duration * 1000, 1),
                status="ok",
                error=None,
            )
        rollouts.append({"start": t, "end": done, "duration_s": duration, "failed": failed, "statuses": statuses})
        t += timedelta(seconds=rng.expovariate(1 / 14))

    # -- periodic events: GPUs every 30 s, cache every minute, timing breakdown every 20 s
    t = start + timedelta(seconds=3)
    tick = 0
    cache_queries = cache_hits = prompt_total = prompt_cached = 0
    while t < end:
        if tick % 3 == 0:
            for gpu in range(2):
                util = min(100.0, max(0.0, rng.gauss(35 if _in(t, periods["slow_rollouts"]) else 82, 8)))
                emit(
                    t + timedelta(milliseconds=gpu),
                    "gpu_stats",
                    "trainer",
                    gpu_index=gpu,
                    gpu_utilization=round(util, 1),
                    memory_utilization=round(rng.uniform(70, 92), 1),
                    memory_used=int(rng.uniform(56, 74) * 1024),
                    memory_total=81920,
                )
        if tick % 6 == 0:
            q = rng.randint(300, 600)
            rate = min(0.95, max(0.0, rng.gauss(0.66, 0.05)))
            h = int(q * rate)
            pt = q * rng.randint(1800, 2600)
            cache_queries, cache_hits = cache_queries + q, cache_hits + h
            prompt_total, prompt_cached = prompt_total + pt, prompt_cached + int(pt * rate)
            emit(
                t + timedelta(milliseconds=20),
                "prefix_cache_stats",
                "inference",
                hit_rate=round(h / q, 4),
                queries=cache_queries,
                hits=cache_hits,
                prompt_tokens_total=prompt_total,
                prompt_tokens_cached=prompt_cached,
            )
        if tick % 2 == 0:
            batch = rng.choice((4, 7, 7, 8, 14))
            gen = rng.uniform(6, 14) * (2.5 if _in(t, periods["slow_rollouts"]) else 1.0)
            adapter = rng.uniform(0.05, 0.4)
            tokens_generated = batch * int(rng.gauss(300, 50))
            prompt_tokens = batch * rng.randint(1800, 2600)
            emit(
                t + timedelta(milliseconds=40),
                "inference_timing_breakdown",
                "inference",
                total_time_s=round(gen + adapter + 0.1, 3),
                generation_time_s=round(gen, 3),
                adapter_load_time_s=round(adapter, 3),
                input_tokens_per_second=round(prompt_tokens / (gen + adapter), 1),
                output_tokens_per_second=round(tokens_generated / gen, 1),
                batch_size=batch,
                prefix_cache_hit_rate=round(min(0.95, max(0.0, rng.gauss(0.66, 0.05))), 3),
                tokens_generated=tokens_generated,
                prompt_tokens=prompt_tokens,
                lora_name=f"adapter_v{int((t - start).total_seconds() // 120)}",
            )
        tick += 1
        t += timedelta(seconds=10)

    # -- training steps: spans every ~2 minutes, a checkpoint every 10 steps
    t = start + timedelta(seconds=60)
    step = 0
    while t < end:
        step += 1
        rollout_s = rng.uniform(40, 60) * (3 if _in(t, periods["slow_rollouts"]) else 1)
        ref_s, update_s = rng.uniform(15, 25), rng.uniform(30, 45)
        at = t
        for name, seconds in (("rollout_phase", rollout_s), ("ref_logprobs", ref_s), ("actor_update", update_s)):
            at += timedelta(seconds=seconds)
            emit(
                at,
                "span_duration",
                "trainer",
                span_name=name,
                duration_ms=round(seconds * 1000, 1),
                status="ok",
                error=None,
            )
        if step % 10 == 0:
            save = rng.uniform(8, 20)
            at += timedelta(seconds=save)
            emit(
                at,
                "span_duration",
                "trainer",
                span_name="checkpoint_save",
                duration_ms=round(save * 1000, 1),
                status="ok",
                error=None,
            )
        emit(
            at + timedelta(milliseconds=5),
            "span_duration",
            "trainer",
            span_name="training_step",
            duration_ms=round((at - t).total_seconds() * 1000, 1),
            status="ok",
            error=None,
        )
        t = at + timedelta(seconds=rng.uniform(1, 3))

    events.sort(key=lambda item: item[0])
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as fh:
        for _, record in events:
            fh.write(json.dumps(record, separators=(",", ":")) + "\n")

    def stats(window: tuple[datetime, datetime] | None) -> dict:
        inside = [r for r in rollouts if r["end"] < end and (window is None or _in(r["start"], window))]
        done = [r for r in inside if not r["failed"]]
        orders: Counter[str] = sum((r["statuses"] for r in inside), Counter())
        total = sum(orders.values())
        return {
            "rollouts": len(inside),
            "failed": sum(r["failed"] for r in inside),
            "error_rate": round(sum(r["failed"] for r in inside) / len(inside), 4) if inside else None,
            "rollout_p50_s": round(sorted(r["duration_s"] for r in done)[len(done) // 2], 1) if done else None,
            "rollout_p95_s": round(_p95([r["duration_s"] for r in done]), 1) if done else None,
            "orders_full_share": round(orders["full"] / total, 4) if total else None,
            "orders_empty_share": round(orders["empty"] / total, 4) if total else None,
            "orders_partial_share": round(orders["partial"] / total, 4) if total else None,
        }

    outside = [p for p in periods.values()]
    normal = [r for r in rollouts if not any(_in(r["start"], w) for w in outside)]
    normal_done = [r for r in normal if not r["failed"] and r["end"] < end]
    return {
        "path": str(path),
        "dataset": DATASET,
        "start": _iso(start),
        "end": _iso(end),
        "seed": seed,
        "events": len(events),
        "counts": dict(sorted(Counter(e["event"] for _, e in events).items())),
        "services": dict(SERVICES),
        "runs": runs,
        "periods": {name: {"start": _iso(w[0]), "end": _iso(w[1]), **stats(w)} for name, w in periods.items()},
        "overall": stats(None),
        "normal": {
            "rollout_p95_s": round(_p95([r["duration_s"] for r in normal_done]), 1) if normal_done else None,
            "error_rate": round(sum(r["failed"] for r in normal) / len(normal), 4) if normal else None,
        },
    }


def _load_emulator():
    """tests/ is not an installed package: load tests/axiom_emulator.py by its path in the repository."""
    name = "grpolens_axiom_emulator"
    if name in sys.modules:
        return sys.modules[name]
    path = PROJECT_ROOT / "tests" / "axiom_emulator.py"
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: the Axiom emulator ships with the repository's tests/")
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the file executes
    spec.loader.exec_module(module)
    return module


@contextmanager
def serve_demo_events(path: Path, dataset: str = DATASET, row_ids: bool = True) -> Iterator[tuple[str, str]]:
    """Serve an NDJSON event file from the Axiom emulator on 127.0.0.1; yields ``(url, token)`` for
    ``pipeline.sources.axiom.ingest(lake, [dataset], url=url, token=token)``. Bad lines are left out."""
    emulator_module = _load_emulator()
    events = []
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if isinstance(event, dict) and "_time" in event:
                events.append(event)
    with emulator_module.AxiomEmulator(row_ids=row_ids) as emulator:
        emulator.add(dataset, events)
        yield emulator.url, emulator.token
