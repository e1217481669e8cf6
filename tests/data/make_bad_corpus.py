"""Build ``tests/data/bad/``: damaged, odd and non-trace inputs made from a real trace.

The source is the small H100 BERT inference trace in ``../shared/traces`` (TraceLens, MIT):
60 kernels, one memcpy, shaped ``cpu_op`` events, ``ac2g`` flows. It is first reduced to what
bwdiag reads (``python_function`` events other than ``nn.Module`` forwards and
``cpu_instant_event`` are dropped, and so is the job's free-form ``metadata`` block, which holds
the recording machine's environment), then written in Kineto's own layout (header keys, one event
per line, ``traceName``/``displayTimeUnit``/``baseTimeNanoseconds`` after the events) and damaged
one way per case.

What each case did is written to ``bad/cases.json`` (counts of events removed, kernels touched,
bytes kept …), so the tests can check bwdiag's numbers against the construction, not against
bwdiag. Re-run with ``python tests/data/make_bad_corpus.py`` from the repository root; the output
is deterministic.
"""

from __future__ import annotations

import copy
import gzip
import json
import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
SOURCE = REPO.parent / "shared" / "traces" / "tracelens" / "h100" / "gaunernst_bert-small-uncased__1016001.json.gz"
OUT = HERE / "bad"

_TRAILER_KEYS = ("traceName", "displayTimeUnit", "baseTimeNanoseconds")


def load_base() -> dict:
    """The BERT trace reduced to the events bwdiag reads, without the job's environment block."""
    with gzip.open(SOURCE, "rb") as fh:
        doc = json.loads(fh.read())
    doc.pop("metadata", None)  # the recording job's env (tokens, pip list): not ours to copy
    doc["traceEvents"] = [
        ev for ev in doc["traceEvents"]
        if ev.get("cat") != "cpu_instant_event"
        and not (ev.get("cat") == "python_function" and not str(ev.get("name", "")).startswith("nn.Module"))
    ]
    return doc


def kineto_bytes(doc: dict, *, close: bool = True) -> bytes:
    """Serialise like Kineto's ChromeTraceLogger: header, one event per line, trailer after the events.

    ``close=False`` stops right after the last event's ``},`` line, as a writer killed mid-trace does.
    """
    head = {k: v for k, v in doc.items() if k not in ("traceEvents", *_TRAILER_KEYS)}
    lines = ["{"]
    for k, v in head.items():
        lines.append(f"  {json.dumps(k)}: {json.dumps(v, ensure_ascii=False)},")
    lines.append('  "traceEvents": [')
    events = [json.dumps(ev, ensure_ascii=False) for ev in doc["traceEvents"]]
    if not close:
        return ("\n".join(lines) + "\n" + "".join(f"  {e},\n" for e in events)).encode("utf-8")
    lines.append(",\n".join(f"  {e}" for e in events))
    trailer = [f"{json.dumps(k)}: {json.dumps(doc[k])}" for k in _TRAILER_KEYS if k in doc]
    lines.append("  ]" + ("," if trailer else ""))
    lines.append("  " + ",\n  ".join(trailer) if trailer else "")
    lines.append("}")
    return ("\n".join(lines) + "\n").encode("utf-8")


def gz(data: bytes) -> bytes:
    return gzip.compress(data, compresslevel=9, mtime=0)


def kernels(doc: dict) -> list[dict]:
    return [ev for ev in doc["traceEvents"] if ev.get("cat") == "kernel"]


def n_gpu(events: list) -> int:
    """GPU activities (kernels, memcpys, memsets): the rows bwdiag's kernel table counts."""
    return sum(1 for ev in events if ev.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"))


def unique_named_kernels(doc: dict) -> list[dict]:
    """Kernels whose name occurs once, longest first (each is a kernel group of its own)."""
    ks = kernels(doc)
    counts: dict[str, int] = {}
    for k in ks:
        counts[k["name"]] = counts.get(k["name"], 0) + 1
    return sorted((k for k in ks if counts[k["name"]] == 1), key=lambda k: -k["dur"])


def late_kernels(doc: dict, n: int) -> list[dict]:
    """The last ``n`` kernels in time (well after the first launch, so never taken for spill-over)."""
    return sorted(kernels(doc), key=lambda k: k["ts"])[-n:]


def write(name: str, data: bytes, cases: dict, **facts) -> None:
    path = OUT / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    cases[name] = facts


# -- salvage cases -------------------------------------------------------------------------------


def reference(base: dict, cases: dict) -> None:
    """The undamaged reduced trace: what every case was made from, and the fuzz test's seed."""
    write("reference_good.json.gz", gz(kineto_bytes(base)), cases, events=len(base["traceEvents"]),
          gpu_activities=n_gpu(base["traceEvents"]))


def truncated_mid_event(base: dict, cases: dict) -> None:
    data = kineto_bytes(base)
    lines = data.split(b"\n")
    first_event = next(i for i, ln in enumerate(lines) if ln.startswith(b"  {"))
    n_events = len(base["traceEvents"])
    keep = n_events * 75 // 100  # complete events before the cut (CPU ops come first: half the kernels survive)
    cut_line = first_event + keep
    cut = len(b"\n".join(lines[:cut_line])) + 1 + len(lines[cut_line]) // 2
    write("truncated_mid_event.json", data[:cut], cases, complete_events=keep,
          gpu_activities=n_gpu(base["traceEvents"][:keep]))


def missing_closing_bracket(base: dict, cases: dict) -> None:
    data = kineto_bytes(base, close=False)
    write("missing_closing_bracket.json.gz", gz(data), cases, complete_events=len(base["traceEvents"]),
          gpu_activities=n_gpu(base["traceEvents"]))


def gzip_cut_short(base: dict, cases: dict) -> None:
    import zlib

    packed = gz(kineto_bytes(base))
    cut = packed[: len(packed) * 85 // 100]
    recovered = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(cut)
    complete = [ln for ln in recovered.split(b"\n") if ln.startswith(b"  {") and ln.rstrip(b",").endswith(b"}")]
    # The last line may be a whole event with no newline after it yet: that one is complete too.
    events = [json.loads(ln.strip().rstrip(b",")) for ln in complete]
    write("gzip_cut_short.json.gz", cut, cases, recovered_bytes=len(recovered), complete_events=len(events),
          gpu_activities=n_gpu(events))


def gzip_corrupt_mid_stream(base: dict, cases: dict) -> None:
    import zlib

    packed = bytearray(gzip.compress(kineto_bytes(base), compresslevel=1, mtime=0))
    at = len(packed) * 3 // 4
    packed[at:at + 40] = b"\xff" * 40  # a damaged disk block three quarters in
    # What a reader fed 16 KiB at a time gets before zlib notices (the piece holding the damage is lost).
    d = zlib.decompressobj(16 + zlib.MAX_WBITS)
    good = b""
    for i in range(0, len(packed), 16 << 10):
        try:
            good += d.decompress(bytes(packed[i:i + (16 << 10)]))
        except zlib.error:
            break
    write("gzip_corrupt_mid_stream.json.gz", bytes(packed), cases, recovered_bytes=len(good))


def damaged_mid_file(base: dict, cases: dict) -> None:
    doc = copy.deepcopy(base)
    a, b = late_kernels(doc, 20)[:2]
    a["name"] = a["name"] + "@@QUOTE@@"
    b["dur"] = "@@BADNUM@@"
    data = kineto_bytes(doc)
    at = data.index(b"@@QUOTE@@")
    # An unescaped quote in a kernel name (seen in the wild) and a mangled number, mid-file.
    data = data.replace(b"@@QUOTE@@", b'"x"').replace(b'"@@BADNUM@@"', b"1.2.3")
    write("damaged_mid_file.json.gz", gz(data), cases, damaged=2, first_damage_byte=at + 1,
          complete_events=len(base["traceEvents"]) - 2, gpu_activities=n_gpu(base["traceEvents"]) - 2)


def non_finite_numbers(base: dict, cases: dict) -> None:
    doc = copy.deepcopy(base)
    ks = late_kernels(doc, 8)
    ks[0]["dur"] = "@@inf@@"
    ks[1]["ts"] = "@@NaN@@"
    ks[2]["dur"] = "@@-Infinity@@"
    ks[3]["args"]["est. achieved occupancy %"] = "@@nan@@"
    data = kineto_bytes(doc)
    for token in (b"inf", b"NaN", b"-Infinity", b"nan"):
        data = data.replace(b'"@@' + token + b'@@"', token)
    write("non_finite_numbers.json.gz", gz(data), cases, non_finite=4, missing_dur=2, missing_ts=1,
          gpu_activities=n_gpu(base["traceEvents"]) - 3)


def control_chars(base: dict, cases: dict) -> None:
    doc = copy.deepcopy(base)
    ks = unique_named_kernels(doc)[:2]
    originals = [k["name"] for k in ks]
    ks[0]["name"] = "@@CTL1@@" + ks[0]["name"]
    ks[1]["name"] = ks[1]["name"] + "@@CTL2@@"
    data = kineto_bytes(doc)
    # Raw (unescaped) control bytes: invalid JSON that C++ writers have produced.
    data = data.replace(b"@@CTL1@@", b"\x01\x07").replace(b"@@CTL2@@", b"\x1b[2J\x08")
    write("control_chars_in_names.json.gz", gz(data), cases, control_chars=4,
          names=[" " + " " + originals[0], originals[1] + " [2J "], gpu_activities=n_gpu(base["traceEvents"]))


def invalid_utf8(base: dict, cases: dict) -> None:
    doc = copy.deepcopy(base)
    ks = unique_named_kernels(doc)[:2]
    originals = [k["name"] for k in ks]
    ks[0]["name"] = "@@U1@@" + ks[0]["name"]
    ks[1]["name"] = ks[1]["name"] + "@@U2@@"
    data = kineto_bytes(doc)
    data = data.replace(b"@@U1@@", b"\xff\xfe").replace(b"@@U2@@", b"\xe2\x82")  # stray bytes, cut sequence
    write("invalid_utf8_in_names.json.gz", gz(data), cases,
          names=["\ufffd\ufffd" + originals[0], originals[1] + "\ufffd"], gpu_activities=n_gpu(base["traceEvents"]))


def unknown_categories(base: dict, cases: dict) -> None:
    doc = copy.deepcopy(base)
    ks = late_kernels(doc, 5)
    extra = []
    for i, k in enumerate(ks):
        extra.append({"ph": "X", "cat": "gpu_future_activity", "name": f"future_thing_{i}", "pid": k["pid"],
                      "tid": k["tid"], "ts": k["ts"], "dur": 1.0, "args": {"device": 0}})
    doc["traceEvents"].extend(extra)
    write("unknown_categories.json.gz", gz(kineto_bytes(doc)), cases, category="gpu_future_activity",
          events=len(extra), gpu_activities=n_gpu(base["traceEvents"]))


def missing_fields(base: dict, cases: dict) -> None:
    doc = copy.deepcopy(base)
    ks = late_kernels(doc, 9)
    for k in ks[:2]:
        del k["ts"]
    for k in ks[2:5]:
        del k["dur"]
    no_args = ks[5:9]
    for k in no_args:
        del k["args"]
    kept_us = sum(k["dur"] for k in kernels(doc) if "ts" in k and "dur" in k)
    write("missing_ts_dur_args.json.gz", gz(kineto_bytes(doc)), cases, missing_ts=2, missing_dur=3,
          kernel_us_left=round(kept_us, 3),
          missing_args=4, no_args_us=round(sum(k["dur"] for k in no_args), 3),
          gpu_activities=n_gpu(base["traceEvents"]) - 5)


def durations(base: dict, cases: dict) -> None:
    doc = copy.deepcopy(base)
    uniq = unique_named_kernels(doc)
    zero = uniq[-3:]  # three kernels, each alone in its group, become instant
    for k in zero:
        k["dur"] = 0
    neg = [k for k in late_kernels(doc, 12) if k not in zero][:2]
    for k in neg:
        k["dur"] = -5.0
    write("zero_and_negative_durations.json.gz", gz(kineto_bytes(doc)), cases, zero=3, negative=2,
          zero_names=[k["name"] for k in zero], gpu_activities=n_gpu(base["traceEvents"]) - 2)


def missing_launches(base: dict, cases: dict) -> None:
    doc = copy.deepcopy(base)
    ks = sorted(kernels(doc), key=lambda k: k["ts"])
    total = sum(k["dur"] for k in ks)
    chosen = ks[len(ks) // 2:]  # the second half of the kernels lose their launches
    corr = {k["args"]["correlation"] for k in chosen}
    for k in chosen:
        k["args"].pop("External id", None)
    doc["traceEvents"] = [
        ev for ev in doc["traceEvents"]
        if not (ev.get("cat") in ("cuda_runtime", "cuda_driver") and ev.get("args", {}).get("correlation") in corr)
        and not (ev.get("cat") == "ac2g" and ev.get("id") in corr)
    ]
    unlinked = sum(k["dur"] for k in chosen)
    write("missing_launches.json.gz", gz(kineto_bytes(doc)), cases, gpu_activities=n_gpu(base["traceEvents"]), unlinked_kernels=len(chosen),
          unlinked_us=round(unlinked, 3), kernel_us=round(total, 3),
          unlinked_pct=round(100 * unlinked / total, 1))


def no_device_properties(base: dict, cases: dict) -> None:
    doc = copy.deepcopy(base)
    del doc["deviceProperties"]
    write("no_device_properties.json.gz", gz(kineto_bytes(doc)), cases, gpu_activities=n_gpu(base["traceEvents"]))


def unknown_device(base: dict, cases: dict) -> None:
    doc = copy.deepcopy(base)
    doc["deviceProperties"][0]["name"] = "Contoso Tensor Engine 7"
    write("unknown_device.json.gz", gz(kineto_bytes(doc)), cases, device="Contoso Tensor Engine 7",
          gpu_activities=n_gpu(base["traceEvents"]))


def _with_rank(base: dict, rank: int | None, world: int) -> bytes:
    doc = copy.deepcopy(base)
    if rank is not None:
        # Kineto writes distributedInfo right after deviceProperties.
        items = list(doc.items())
        at = [k for k, _ in items].index("deviceProperties") + 1
        items.insert(at, ("distributedInfo", {"backend": "nccl", "rank": rank, "world_size": world}))
        doc = dict(items)
    return gz(kineto_bytes(doc))


def rank_folders(base: dict, cases: dict) -> None:
    n = n_gpu(base["traceEvents"])
    write("one_bad_rank/rank0.json.gz", _with_rank(base, 0, 3), cases, rank=0, gpu_activities=n)
    write("one_bad_rank/rank1.json.gz", _with_rank(base, 1, 3), cases, rank=1, gpu_activities=n)
    # Rank 2 died while its gzip header was being written: a header and then garbage.
    write("one_bad_rank/rank2.json.gz", b"\x1f\x8b\x08\x00" + b"\x00" * 4 + b"\xff" * 40, cases, rank=2)
    write("duplicate_rank/node0_worker.json.gz", _with_rank(base, 0, 2), cases, rank=0, gpu_activities=n)
    write("duplicate_rank/node1_worker.json.gz", _with_rank(base, 0, 2), cases, rank=0, gpu_activities=n)
    write("no_distributed_info/worker_a.json.gz", _with_rank(base, None, 2), cases, gpu_activities=n)
    write("no_distributed_info/worker_b.json.gz", _with_rank(base, None, 2), cases, gpu_activities=n)


def html_in_names(base: dict, cases: dict) -> None:
    doc = copy.deepcopy(base)
    totals: dict[str, float] = {}
    for k in kernels(doc):
        totals[k["name"]] = totals.get(k["name"], 0.0) + k["dur"]
    top = sorted(totals, key=lambda n: -totals[n])[:3]  # the three longest kernel groups: all in the table
    # HTML/JS, rich console markup, and terminal escapes (valid JSON: written as \\u001b, \\u0007).
    names = ['<script>alert("k")</script>', "[bold red]x[/] & </b>", "\x1b[2J\x07clear_screen"]
    rename = dict(zip(top, names))
    for k in kernels(doc):
        k["name"] = rename.get(k["name"], k["name"])
    # The ops that launched the third group (same External id) get an HTML name too, every instance,
    # so the name is the op of that kernel row.
    third = next(k for k in kernels(doc) if k["name"] == names[2])
    launcher = next(ev for ev in doc["traceEvents"]
                    if ev.get("cat") == "cpu_op" and ev["args"].get("External id") == third["args"]["External id"])
    old_op = launcher["name"]
    for ev in doc["traceEvents"]:
        if ev.get("cat") == "cpu_op" and ev["name"] == old_op:
            ev["name"] = "</script><img src=x onerror=alert(1)>"
    op = launcher
    write("html_in_names.json.gz", gz(kineto_bytes(doc)), cases, kernel_names=names, op_name=op["name"],
          op_kernel=names[2], gpu_activities=n_gpu(base["traceEvents"]))


def old_categories(base: dict, cases: dict) -> None:
    doc = copy.deepcopy(base)
    old = {"kernel": "Kernel", "cuda_runtime": "Runtime", "cuda_driver": "Driver", "cpu_op": "Operator",
           "gpu_memcpy": "Memcpy"}
    for ev in doc["traceEvents"]:
        if ev.get("cat") in old:
            ev["cat"] = old[ev["cat"]]
    write("old_kineto_categories.json.gz", gz(kineto_bytes(doc)), cases, gpu_activities=n_gpu(base["traceEvents"]),
          kernel_us=round(sum(k["dur"] for k in kernels(base)), 3))


# -- refusal cases -------------------------------------------------------------------------------


def refusals(base: dict, cases: dict) -> None:
    write("empty.json", b"", cases)
    write("not_json_or_gzip.json",
          b"step 10 loss 2.3131 lr 1.0e-04\nstep 20 loss 2.2875 lr 1.0e-04\nTraceback (most recent call last):\n",
          cases)
    write("corrupt_gzip.json.gz", b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03" + bytes(range(7, 250, 3)), cases)
    write("not_a_trace.json", json.dumps({"model": "bert-small", "lr": 1e-4, "events": ["warmup", "train"]},
                                         indent=2).encode(), cases)
    write("array_of_numbers.json", b"[1, 2, 3]\n", cases)
    head = {k: v for k, v in base.items() if k != "traceEvents"}
    write("no_events.json.gz", gz(kineto_bytes({**head, "traceEvents": []})), cases)
    write("bwdiag_output/diagnosis.json", json.dumps(
        {"schema": "bwdiag/diagnosis@1", "source": {"paths": ["trace.json.gz"], "ranks": [0], "trace_kind": "gpu",
                                                     "torch_version": None},
         "kernels": [], "findings": [], "warnings": []}, indent=1).encode(), cases)
    write("empty_folder/README.txt", b"This folder holds no trace files (git keeps no empty folders).\n", cases)


def main() -> int:
    if not SOURCE.exists():
        print(f"source trace not found: {SOURCE} (../shared/traces is needed to rebuild the corpus)",
              file=sys.stderr)
        return 1
    if OUT.exists():
        shutil.rmtree(OUT)
    base = load_base()
    cases: dict = {}
    for build in (reference, truncated_mid_event, missing_closing_bracket, gzip_cut_short, gzip_corrupt_mid_stream, damaged_mid_file, non_finite_numbers, control_chars,
                  invalid_utf8, unknown_categories, missing_fields, durations, missing_launches,
                  no_device_properties, unknown_device, rank_folders, html_in_names, old_categories, refusals):
        build(base, cases)
    cases["_base"] = {"source": str(SOURCE.relative_to(REPO.parent)), "events": len(base["traceEvents"]),
                      "kernels": len(kernels(base)), "gpu_activities": n_gpu(base["traceEvents"]),
                      "gpu_us": round(sum(ev["dur"] for ev in base["traceEvents"]
                                          if ev.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")), 3),
                      "kernel_us": round(sum(k["dur"] for k in kernels(base)), 3)}
    (OUT / "cases.json").write_text(json.dumps(cases, indent=1, ensure_ascii=False) + "\n")
    total = sum(p.stat().st_size for p in OUT.rglob("*") if p.is_file())
    print(f"wrote {len(cases) - 1} files, {total:,} bytes, under {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
