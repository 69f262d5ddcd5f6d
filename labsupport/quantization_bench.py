"""``python -m labsupport.bench quantization``: INT8/INT4 vs FP32 on the wide MLP and the course CNN.

The headless twin of notebook 06: builds each model's variants (INT8 dynamic and INT8 static QDQ
per-channel, both with 7-bit weights; INT4 weight-only where the model has MatMul weights; FP16;
the FP32 file again as an A/A control) under ``artifacts/quantization/``, measures file size, test
accuracy and median latency at batch 1 and 64 in one run, prints the ratios against FP32 and the
timing noise that the A/A row shows, checks the course's targets (see
``labsupport.quantization.check_targets``) and writes ``artifacts/bench_quantization.json``.
Exit status 0 even when a timing target is missed (the report says which and why); 1 when a size
or accuracy target is missed.
"""

from __future__ import annotations

import argparse

from labsupport.paths import artifact, relative
from labsupport.quantization import (
    AA_NAME,
    build_variants,
    check_targets,
    cpu_features,
    ensure_digits_mlp,
    measure_variants,
    save_json,
)

RATIO_VARIANTS = ("INT8 dynamic", "INT8 static", "INT4 weights", "FP16", AA_NAME)
TEST_IMAGES = 540  # one test image is 100 / 540 = 0.185 accuracy points


def _ratio_lines(report) -> list[str]:
    lines = [f"{report.model} (baseline FP32: {report.get('FP32').size_kb:,.0f} KB, accuracy {100 * report.get('FP32').accuracy:.1f}%)"]
    header = f"  {'variant':<18}{'size/FP32':>10}{'lat/FP32 b1':>13}{'lat/FP32 b64':>14}{'Δacc pt':>9}"
    lines.append(header)
    for name in _measured(report):
        lines.append(
            f"  {name:<18}{report.size_ratio(name):>10.2f}{report.latency_ratio(name, 1):>13.2f}"
            f"{report.latency_ratio(name, 64):>14.2f}{report.accuracy_delta(name):>+9.1f}"
        )
    noise = {batch: report.timing_noise(batch) for batch in (1, 64)}
    lines.append(
        f"  timing noise (A/A, at least 10%): ±{noise[1]:.0%} at batch 1, ±{noise[64]:.0%} at batch 64; "
        f"accuracy resolution: 1 test image = {100 / TEST_IMAGES:.3f} points"
    )
    return lines


def _measured(report) -> list[str]:
    names = {result.name for result in report.results}
    return [name for name in RATIO_VARIANTS if name in names]


def main(argv: list[str] | None = None) -> int:
    """Run the suite; prints the ratio table and target verdicts, writes artifacts/bench_quantization.json."""
    parser = argparse.ArgumentParser(prog="python -m labsupport.bench quantization")
    parser.add_argument("--repeat", type=int, default=30, help="timed runs per variant and batch size")
    parser.add_argument("--threads", type=int, default=1, help="ORT intra-op threads per session")
    args = parser.parse_args(argv or [])

    from labsupport.models import ensure_digits_cnn

    cpu = cpu_features()
    print(cpu)
    folder = artifact("quantization/bench")
    folder.mkdir(parents=True, exist_ok=True)
    reports = []
    for model, src in (("wide MLP 64-2048-2048-10", ensure_digits_mlp()), ("digits CNN", ensure_digits_cnn())):
        variants = build_variants(src, folder)
        reports.append(measure_variants(variants, model=model, threads=args.threads, repeat=args.repeat))
    mlp, cnn = reports
    for report in reports:
        print()
        print("\n".join(_ratio_lines(report)))
    print("\nNo INT4 row for the CNN: MatMulNBits quantizes MatMul weights only, and the CNN has Conv and Gemm.")
    targets = check_targets(mlp, cnn)
    print("\nTargets:")
    for target in targets:
        print(f"  {target}")
    missed_timing = [t for t in targets if t.timing and not t.met]
    if missed_timing:
        print(
            "  A latency target was missed: check that the machine was idle, and the CPU features above "
            "(without VNNI/AMX the INT8 kernels have little advantage over FP32)."
        )
    path = save_json(
        artifact("bench_quantization.json"),
        {
            "cpu": {"arch": cpu.arch, "features": cpu.features, "int8_dot_product": cpu.int8_dot_product},
            "threads": args.threads,
            "models": [r.to_dict() for r in reports],
            "ratios": {
                r.model: {
                    name: {
                        "size": r.size_ratio(name),
                        "latency_b1": r.latency_ratio(name, 1),
                        "latency_b64": r.latency_ratio(name, 64),
                        "accuracy_delta_points": r.accuracy_delta(name),
                    }
                    for name in _measured(r)
                }
                for r in reports
            },
            "targets": [{"model": t.model, "what": t.what, "value": t.value, "limit": t.limit, "met": t.met} for t in targets],
        },
    )
    print(f"\nwrote {relative(path)}")
    return 1 if any(not t.met and not t.timing for t in targets) else 0


if __name__ == "__main__":
    raise SystemExit(main())
