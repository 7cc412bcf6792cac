"""Digest every GEMM kernel the SM90 and SM80 suites compile, on the CPU (no GPU needed).

    python scripts/kernel_objects.py keys > keys.json       # the suites' compile keys
    python scripts/kernel_objects.py digest keys.json > objects.json
    python scripts/kernel_objects.py compare before.json after.json

A restructuring that must not change kernel code is proven by equal digests: each compile key
(knobs, kernel epilogue, kernel layout, arch, kernel) is compiled with CuTe DSL and exported with
``export_to_c``; the digest is the sha256 of that object. Keys are written as plain dicts, so a
key list taken from one tree can be compiled by another.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import hashlib
import importlib.util
import json
import os
import pathlib
import sys
import tempfile
import time

CASES = pathlib.Path(__file__).resolve().parents[1] / "packages" / "engines-gemm" / "tests" / "gemm_cases.py"


def _compile_keys():
    """(kernel, arch, knobs, kernel epilogue, kernel layout) of every case of the SM90 and SM80 suites."""
    spec = importlib.util.spec_from_file_location("gemm_cases", CASES)
    cases = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = cases  # dataclasses resolve their module's annotations through it
    spec.loader.exec_module(cases)
    yield from cases.compile_keys()


def _changed(value) -> dict:
    """The fields of a config dataclass that differ from its defaults (a key stays valid when a
    field with its default value is added or removed)."""
    try:
        default = type(value)()
    except TypeError:  # a field without a default: every field is part of the key
        return dataclasses.asdict(value)
    return {
        f.name: getattr(value, f.name)
        for f in dataclasses.fields(value)
        if getattr(value, f.name) != getattr(default, f.name)
    }


def keys(_args) -> int:
    seen, rows = set(), []
    for kernel, arch, kn, kepi, lay in _compile_keys():
        row = {
            "kernel": kernel,
            "arch": arch,
            "knobs": _changed(kn),
            "epilogue": dataclasses.asdict(kepi),
            "layout": dataclasses.asdict(lay),
        }
        ident = json.dumps(row, sort_keys=True)
        if ident not in seen:
            seen.add(ident)
            rows.append(row)
    json.dump(rows, sys.stdout, indent=1, sort_keys=True)
    return 0


def _build(cls, values: dict):
    """``cls(**values)``: a knob the tree no longer has raises (its kernel is gone)."""
    missing = sorted(set(values) - {f.name for f in dataclasses.fields(cls)})
    if missing:
        raise KeyError(f"{cls.__name__} has no field {missing}")
    return cls(**values)


def digest(args) -> int:
    from pygraph_gemm.kernels.compile_cache import FN_NAME, compile_uncached
    from pygraph_gemm.kernels.config import GemmKnobs, KernelEpilogue, KernelLayout

    rows = json.load(open(args.keys))
    out, t0 = {}, time.time()
    with tempfile.TemporaryDirectory() as tmp:
        for i, row in enumerate(rows):
            ident = json.dumps(row, sort_keys=True)
            try:
                kn = _build(GemmKnobs, row["knobs"])
                kepi = _build(KernelEpilogue, row["epilogue"])
                lay = _build(KernelLayout, row["layout"])
                fn = compile_uncached(kn, kepi, lay, row["arch"], row["kernel"])
                path = os.path.join(tmp, f"{i}.o")
                fn.export_to_c(path, function_name=FN_NAME)
                with open(path, "rb") as f:
                    out[ident] = hashlib.sha256(f.read()).hexdigest()
            except Exception as exc:  # reported per key: a key one tree refuses is a difference too
                out[ident] = f"error: {type(exc).__name__}: {str(exc)[:200]}"
            print(
                f"[{i + 1}/{len(rows)} {time.time() - t0:.0f}s] {out[ident][:16]}",
                file=sys.stderr,
                flush=True,
            )
    json.dump(out, sys.stdout, indent=1, sort_keys=True)
    return 0


def _removed(digest: str) -> bool:
    """A key whose knob, epilogue or layout field the tree no longer has (`_build` refused it)."""
    return digest.startswith("error: KeyError") and "has no field" in digest


def compare(args) -> int:
    """Identical, differing, removed (a field of the key is gone from the tree: its kernel went with
    it) and not compiled keys; fails on any differing or missing key."""
    before, after = json.load(open(args.before)), json.load(open(args.after))
    same = [k for k in before if after.get(k) == before[k]]
    removed = [k for k in before if k in after and after[k] != before[k] and _removed(after[k])]
    differ = [k for k in before if k in after and after[k] != before[k] and not _removed(after[k])]
    missing = [k for k in before if k not in after]
    print(
        f"{len(before)} keys: {len(same)} identical, {len(differ)} differ, {len(removed)} removed "
        f"(a field the tree no longer has), {len(missing)} not compiled"
    )
    gone = collections.Counter(after[k].split("has no field ", 1)[1].strip("\"'") for k in removed)
    for fields, count in sorted(gone.items()):
        print(f"REMOVED {count} with {fields}")
    for k in differ:
        print(f"DIFFER {k}\n  {before[k][:64]}\n  {after[k][:64]}")
    return 0 if not differ and not missing else 1


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("keys").set_defaults(run=keys)
    d = sub.add_parser("digest")
    d.add_argument("keys")
    d.set_defaults(run=digest)
    c = sub.add_parser("compare")
    c.add_argument("before")
    c.add_argument("after")
    c.set_defaults(run=compare)
    args = ap.parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    raise SystemExit(main())
