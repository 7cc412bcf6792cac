"""Energy per launch of gemm_sm90 knob sets and the cuBLAS anchors, read from the GPU's own counter.

    PYTHONPATH=packages/engines-gemm/src:benchmarks python benchmarks/energy_gemm.py \
        --knobs 128x256c21z8g2 --shapes 8192x8192x8192 --seconds 3 --rounds 3

On a power-capped part a long job's throughput is FLOPs per joule: every kernel settles at the cap,
and the clock it settles to is what its energy per FLOP allows (kernels/NOTES.md v11). Each column
here runs alone for ``--seconds`` of back-to-back launches per round (rotated order, as ab_gemm.py)
while the SM clock, the board power and the clock-event (throttle) reasons are sampled every 10 ms.
Printed per column (medians over rounds; the first quarter of each column's samples is left out as
the settling): TFLOP/s, SM clock, board power, millijoules per launch (steady power x time per
launch) and TFLOP per joule, the energy ratio against the unfused addmm-then-gelu (>1: less energy
than it), and the share of samples with the software power cap and with a hardware slowdown
(thermal, power brake or the slowdown signal). NVML's total-energy counter is not used: at 3 s per
column it read up to 10% off power x time (it lags). NVML comes from the driver
(libnvidia-ml.so.1) through ctypes; no Python package is needed.
"""

from __future__ import annotations

import ctypes
import os
import statistics
import threading
import time

import torch
from ab_gemm import column_parser, columns
from bench_gemm import rotated, tflops

NVML_CLOCK_SM = 1
# nvmlClocksEventReasons bits
SW_POWER_CAP = 0x4
HW_SLOWDOWN = 0x8 | 0x40 | 0x80  # the slowdown signal, hardware thermal, hardware power brake


class NvmlError(RuntimeError):
    """An NVML call failed: names the call and its status code."""


class Nvml:
    """The NVML readings this benchmark needs, for the device torch calls cuda:0."""

    def __init__(self):
        try:
            self.lib = ctypes.CDLL("libnvidia-ml.so.1")
        except OSError as exc:
            raise NvmlError(f"libnvidia-ml.so.1 could not be loaded: {exc}") from exc
        self._call("nvmlInit_v2")
        visible = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0]
        index = int(visible) if visible.isdigit() else 0
        self.handle = ctypes.c_void_p()
        self._call("nvmlDeviceGetHandleByIndex_v2", ctypes.c_uint(index), ctypes.byref(self.handle))

    def _call(self, name: str, *args) -> None:
        status = getattr(self.lib, name)(*args)
        if status != 0:
            raise NvmlError(f"{name} returned NVML status {status}")

    def clock_event_reasons(self) -> int:
        out = ctypes.c_ulonglong()
        self._call("nvmlDeviceGetCurrentClocksThrottleReasons", self.handle, ctypes.byref(out))
        return out.value

    def sm_clock_mhz(self) -> int:
        out = ctypes.c_uint()
        self._call("nvmlDeviceGetClockInfo", self.handle, ctypes.c_uint(NVML_CLOCK_SM), ctypes.byref(out))
        return out.value

    def power_w(self) -> float:
        out = ctypes.c_uint()
        self._call("nvmlDeviceGetPowerUsage", self.handle, ctypes.byref(out))
        return out.value / 1000.0


def run_column(fn, nvml: Nvml, launches: int) -> dict:
    """``launches`` back-to-back launches of ``fn``: ms and mJ per launch, the steady clock and power,
    and the shares of samples power-capped and slowed down."""
    samples: list[tuple[int, float, int]] = []
    done = threading.Event()

    def sample():
        while not done.is_set():
            samples.append((nvml.sm_clock_mhz(), nvml.power_w(), nvml.clock_event_reasons()))
            time.sleep(0.01)

    torch.cuda.synchronize()
    sampler = threading.Thread(target=sample, daemon=True)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    sampler.start()
    start.record()
    for _ in range(launches):
        fn()
    end.record()
    end.synchronize()
    done.set()
    sampler.join()
    # the first quarter of the samples is the clock settling; the mean of the rest is the steady state
    steady = samples[len(samples) // 4 :] or samples
    ms = start.elapsed_time(end) / launches
    watts = statistics.fmean(s[1] for s in steady)
    return {
        "ms": ms,
        "mj": watts * ms,
        "mhz": statistics.fmean(s[0] for s in steady),
        "w": watts,
        "capped": statistics.fmean(bool(s[2] & SW_POWER_CAP) for s in steady),
        "slowed": statistics.fmean(bool(s[2] & HW_SLOWDOWN) for s in steady),
    }


def main(argv=None) -> int:
    ap = column_parser(rounds=3)
    ap.add_argument("--seconds", type=float, default=3.0, help="run time per column per round")
    args = ap.parse_args(argv)
    if args.seconds <= 0 or args.rounds < 1:
        ap.error(f"--seconds must be > 0 and --rounds >= 1, got {args.seconds} and {args.rounds}")
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float16
    nvml = Nvml()
    for shape in args.shapes.split(","):
        m, n, k = (int(x) for x in shape.split("x"))
        cols = columns(m, n, k, args.knobs.split(","), args.epilogue, dtype)
        names = list(cols)
        probe = run_column(cols["unfused"], nvml, 20)  # how many launches fill the time asked
        launches = max(20, int(args.seconds * 1000 / probe["ms"]))
        rounds = []
        for r in range(args.rounds):
            rounds.append({name: run_column(cols[name], nvml, launches) for name in rotated(names, r)})
        print(
            f"\n{shape} {args.dtype} {args.epilogue}, {args.rounds} rounds x {launches} launches per column: "
            "TFLOP/s, SM MHz, W, mJ/launch, TFLOP/J, energy vs unfused (>1: less), "
            "share of samples power-capped, slowed down"
        )
        for name in names:
            med = {key: statistics.median(rt[name][key] for rt in rounds) for key in rounds[0][name]}
            vs_unfused = statistics.median(rt["unfused"]["mj"] / rt[name]["mj"] for rt in rounds)
            tflop = 2 * m * n * k / 1e12
            print(
                f"  {name:24s} {tflops(m, n, k, med['ms']):7.1f} {med['mhz']:6.0f} {med['w']:6.1f} "
                f"{med['mj']:8.1f} {tflop / (med['mj'] / 1000):7.3f} {vs_unfused:7.3f} "
                f"{med['capped']:5.2f} {med['slowed']:5.2f}"
            )
    print(f"device: {torch.cuda.get_device_name()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
