"""Issue 14's reproducers, one test each: hostile numbers, files, API values and databases get one
line (InputError / exit 2), never a traceback, a hang, NaN/Infinity in JSON or a raw escape."""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import signal
import sqlite3
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpuplan import Job, plan
from gpuplan.bounds import BOUNDS, check_int, check_number
from gpuplan.cli import main
from gpuplan.errors import InputError, printable, shown
from gpuplan.models import load_model
from gpuplan.units import parse_bytes, parse_count, parse_flops, parse_positive_int

CORPUS = Path(__file__).resolve().parent / "corpus"
HERE = Path(__file__).resolve().parent


@pytest.fixture(autouse=True)
def _empty_bench_db(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUPLAN_BENCH_DB", str(tmp_path / "empty.sqlite"))


def run_cli(*argv: str, limit_s: float = 10.0) -> tuple[int, str, str, float]:
    out, err = io.StringIO(), io.StringIO()
    t = time.perf_counter()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(list(argv))
    dt = time.perf_counter() - t
    assert dt < limit_s, f"{argv!r:.200} took {dt:.1f} s"
    return rc, out.getvalue(), err.getvalue(), dt


def assert_one_line_error(rc: int, err: str, *needles: str) -> None:
    assert rc == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpuplan: error: "), err[:400]
    assert len(lines[0]) < 400, lines[0]
    for n in needles:
        assert n in lines[0], lines[0]


# ------------------------------------------------------------------------------------------------
# 1. Bounds: hangs and overflows from numbers


@pytest.mark.parametrize("argv", [
    ("fit", "llama-3.1-8b", "--gpu", "t4", "--grad-accum", "1000000000000"),
    ("fit", "gpt2", "--gpu", "t4", "--batch", "1000000000000"),
])
def test_the_issue_hangs_return_at_once_with_the_range(argv):
    rc, _, err, dt = run_cli(*argv, limit_s=5)
    assert_one_line_error(rc, err, "at most 2147483648")


def test_the_solver_at_the_largest_accepted_batch_is_fast():
    # 2^31 x (2^31 - 1): enumeration of divisors up to the product (2^62) would never end;
    # factorization makes it ~46,000 trial divisions.
    rc, out, err, dt = run_cli("fit", "gpt2", "--gpu", "t4", "--batch", str(2**31),
                               "--grad-accum", str(2**31 - 1), "--json", limit_s=20)
    assert rc == 0, err


def test_divisors_by_factorization_equal_enumeration():
    from gpuplan.solver import _divisors

    for a in range(1, 60):
        for b in (1, 2, 7, 12, 36, 97):
            n = a * b
            assert _divisors(a, b) == [d for d in range(1, n + 1) if n % d == 0]
    p = 2**31 - 1  # a Mersenne prime: 4 divisors of p * 2^31 ... 2 * 32 of them
    assert len(_divisors(p, 2**31)) == 64


HUGE = str(10**300)


@pytest.mark.parametrize("argv,needle", [
    (("fit", "gpt2", "--batch", HUGE), "--batch"),
    (("fit", "gpt2", "--lora-rank", str(10**400)), "--lora-rank"),
    (("fit", "gpt2", "--seq", "9" * 4301), "--seq"),
    (("flops", "matmul", "1x1", f"1x{10**309}", "--gpu", "h100"), "KxN"),
    (("flops", "matmul", "1x1", "1x1", "--tile", f"{10**400}x{10**400}"), "--tile"),
    (("flops", "matmul", "1x1", "1x3000000000"), "at most 2147483648"),
    (("speed", "gpt2", "--gpu", "h100", "--price", "1e308", "--tokens", "1B", "--json"),
     "--price"),
    (("speed", "gpt2", "--gpu", "h100", "--gpus", "2", "--link", "1e300", "--json"), "--link"),
    (("fit", "gpt2", "--params", HUGE), None),
    (("fit", "a" * 300), "File name too long"),
    (("fit", "gpt2", "--cuda-context", "1e300GB"), "--cuda-context"),
])
def test_huge_values_are_one_line_errors(argv, needle):
    rc, out, err, _ = run_cli(*argv)
    assert_one_line_error(rc, err, *([needle] if needle else []))


def test_one_table_of_ranges_is_what_every_layer_checks():
    hi = int(BOUNDS["batch"].high)
    assert hi == 2**31 == BOUNDS["grad_accum"].high == BOUNDS["lora_rank"].high
    assert BOUNDS["layers"].high == 10**4
    assert parse_positive_int(str(hi), what="--batch") == hi
    with pytest.raises(InputError, match=r"at most 2147483648"):
        parse_positive_int(str(hi + 1), what="--batch")
    Job(model="gpt2", batch=hi, grad_accum=hi, lora_rank=hi)
    with pytest.raises(InputError, match=r"batch 2147483649: expected a whole number >= 1 and "
                                         r"<= 2\^31 \(a micro-batch size\)"):
        Job(model="gpt2", batch=hi + 1)
    with pytest.raises(InputError, match="at most 2\\^60 bytes"):
        parse_bytes(2**60 + 1)
    assert parse_bytes("1000TB") == 10**15  # petabytes are inside the range
    with pytest.raises(InputError):
        parse_flops(10**400)  # an int too large for a float is refused, not OverflowError
    with pytest.raises(InputError):
        parse_count(10**400)
    assert check_number(0.5, "fraction") == 0.5
    with pytest.raises(InputError, match="got str"):
        check_int("5", "batch")


def test_shown_values_are_short_and_escaped():
    assert shown(10**5000) == "<a 16610-bit integer>"
    assert "\x1b" not in shown("\x1b[31mred") and "\\x1b" in shown("\x1b[31mred")
    assert shown("x" * 1000).endswith("...(1000 chars)")
    assert printable("a\nb\x1b") == "a\\nb\\x1b"


# ------------------------------------------------------------------------------------------------
# 2. The typed API boundary


@pytest.mark.parametrize("kw,needle", [
    (dict(precision=5), "precision 5: expected a string (got int)"),
    (dict(offload_optimizer="no"), "offload_optimizer 'no': expected true or false"),
    (dict(fused_optimizer=1), "fused_optimizer 1: expected true or false"),
    (dict(batch=2.0), "batch 2.0: expected a whole number (got float)"),
    (dict(batch=10**300), "batch <a 997-bit integer>"),
    (dict(seq=True), "seq True"),
    (dict(zero=True), "zero True"),
    (dict(lora_dropout=float("nan")), "lora_dropout nan"),
    (dict(model=7), "model 7: expected a name, a path or a Model"),
    (dict(mode=["train"]), "mode ['train']: expected a string"),
    (dict(lora_rank=8, lora_targets="q_proj"), "lora_targets 'q_proj': expected a list"),
    (dict(lora_rank=8, lora_targets=[1]), "lora_targets [1]"),
    (dict(precision="x" * 10**6), "(1000000 chars): too long for a name"),
])
def test_job_checks_types_and_names_the_field(kw, needle):
    kw.setdefault("model", "gpt2")
    with pytest.raises(InputError) as e:
        Job(**kw)
    assert needle in str(e.value)
    assert "\n" not in str(e.value) and len(str(e.value)) < 300


def test_sequences_become_tuples():
    job = Job(model="gpt2", lora_rank=8, lora_targets=["q_proj", "v_proj"])
    assert job.lora_targets == ("q_proj", "v_proj")
    hash(job)  # a list inside would make it unhashable


@pytest.mark.parametrize("overrides,needle", [
    ({"cuda_context": -10**9}, "overhead cuda_context -1000000000"),
    ({"cuda_context": "abc"}, "overhead cuda_context 'abc'"),
    ({"fragmentation": 2}, "fragmentation 2"),
    ({"fragmentation": float("inf")}, "fragmentation inf"),
    ({"nope": 1}, "overhead item 'nope'"),
    ([("cuda_context", 1)], "expected a mapping"),
])
def test_overhead_overrides_are_checked(overrides, needle):
    with pytest.raises(InputError) as e:
        plan(Job(model="gpt2"), ["h100"], overhead_overrides=overrides)
    assert needle in str(e.value)


def test_overrides_set_exact_bytes_and_plan_takes_one_gpu_name():
    p = plan(Job(model="gpt2", mode="train"), "h100", overhead_overrides={"cuda_context": 0})
    ctx = [i for i in p.train.overhead.items if i.name.startswith("CUDA context")]
    assert ctx and ctx[0].expected == 0
    assert len(p.gpus) == 1
    with pytest.raises(InputError, match="speed 'yes': expected true or false"):
        plan(Job(model="gpt2"), "h100", speed="yes")


# ------------------------------------------------------------------------------------------------
# 3. Readers


def _corpus_cases():
    return sorted(p.name for p in CORPUS.iterdir() if p.suffix in (".json", ".safetensors"))


#: Corpus files that are valid models (read, planned, printed); every other file is refused.
_VALID = {"config_float_huge.json", "st_ansi_name.safetensors", "st_scalar.safetensors"}


@pytest.mark.parametrize("name", _corpus_cases())
def test_every_corpus_file_is_read_or_refused_in_one_line(name):
    path = str(CORPUS / name)
    for argv in (("models", path), ("fit", path, "--gpu", "h100", "--json")):
        rc, out, err, dt = run_cli(*argv, limit_s=5)
        if name in _VALID:
            assert rc == 0, err
        else:
            assert_one_line_error(rc, err)
        assert "\x1b" not in out + err


@pytest.mark.parametrize("name,needle", [
    ("config_nested_500.json", "nested more than 64 levels"),
    ("config_layers_int32.json", '"num_hidden_layers" is 2147483647; larger than the limit 10000'),
    ("config_layers_1e7.json", '"num_hidden_layers" is 10000000; larger than the limit 10000'),
    ("config_digits_4300.json", "<a 14285-bit integer>"),
    ("st_no_tensors.safetensors", "holds no tensor with any elements"),
    ("st_zero_elements.safetensors", "holds no tensor with any elements"),
    ("st_only_metadata.safetensors", "holds no tensor with any elements"),
])
def test_the_issue_files_get_their_own_message(name, needle):
    with pytest.raises(InputError) as e:
        load_model(str(CORPUS / name))
    assert needle in str(e.value)


def test_the_deepest_accepted_layer_count_is_planned_quickly(tmp_path):
    cfg = json.loads((CORPUS / "config_layers_int32.json").read_text())
    cfg["num_hidden_layers"] = 10**4
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    rc, out, err, dt = run_cli("fit", str(tmp_path / "config.json"), "--gpu", "h100", "--json",
                               limit_s=10)
    assert rc == 0, err


def test_a_100mb_header_of_millions_of_keys_is_refused_fast(tmp_path):
    n = 3_500_000
    body = b'{"__metadata__": {' + b",".join(b'"k%d":""' % i for i in range(n)) + b"}}"
    assert len(body) > 40_000_000
    p = tmp_path / "big.safetensors"
    p.write_bytes(struct.pack("<Q", len(body)) + body)
    del body
    t = time.perf_counter()
    with pytest.raises(InputError, match="holds about 3,500,00[0-9] keys; at most 400,000"):
        load_model(str(p))
    assert time.perf_counter() - t < 2


def test_a_config_json_that_is_a_directory_has_its_own_message(tmp_path):
    (tmp_path / "config.json").mkdir()
    with pytest.raises(InputError, match="config.json: is a directory; a model directory's "
                                         "config.json must be a file"):
        load_model(str(tmp_path))


def test_an_unreadable_directory_is_one_line(tmp_path, monkeypatch):
    # root reads any directory, so the refusal is what the OS would raise for another user
    from gpuplan.models import _load

    def denied(d, **_kw):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(_load, "_read_dir", denied)
    with pytest.raises(InputError, match="cannot be read \\(Permission denied\\)"):
        load_model(str(tmp_path))


def test_tensor_names_with_escapes_are_escaped_in_text():
    rc, out, err, _ = run_cli("models", str(CORPUS / "st_ansi_name.safetensors"))
    assert rc == 0
    assert "\x1b" not in out and "\\x1b[2J\\x1b[31mevil\\nname" in out
    rc, out, _, _ = run_cli("models", str(CORPUS / "st_ansi_name.safetensors"), "--json")
    assert json.loads(out)["tensors"][0]["name"] == "\x1b[2J\x1b[31mevil\nname"  # data kept


# ------------------------------------------------------------------------------------------------
# 4. Output always valid


def _strict(text: str) -> object:
    def refuse(c):
        raise AssertionError(f"{c} in JSON output")
    return json.loads(text, parse_constant=refuse)


@pytest.mark.parametrize("model", ["vit-base-patch16-224", "bert-base-uncased"])
def test_an_encoder_in_infer_mode_has_no_nan(model):
    rc, out, err, _ = run_cli("fit", model, "--mode", "infer", "--gpu", "h100")
    assert rc == 0 and "nan" not in out.lower(), out
    assert "— (encoder)" in out
    rc, out, err, _ = run_cli("fit", model, "--mode", "infer", "--gpu", "h100", "--json")
    _strict(out)


def test_json_text_writes_null_for_non_finite():
    from gpuplan._io import json_text

    assert json.loads(json_text({"a": math.inf, "b": [math.nan, 1.5], "c": -math.inf})) == \
        {"a": None, "b": [None, 1.5], "c": None}


def test_speed_json_with_the_largest_price_and_link_is_strict():
    rc, out, err, _ = run_cli("speed", "gpt2", "--gpu", "h100", "--gpus", "2", "--link", "1e7",
                              "--price", "1e6", "--tokens", "1T", "--json")
    assert rc == 0, err
    _strict(out)


# ------------------------------------------------------------------------------------------------
# 5. The bench store heals and distrusts

sys.path.insert(0, str(HERE.parent / "unit"))  # the measured-run helpers of test_compute_measured
from test_compute_measured import KEY, _run  # noqa: E402


def _kill_mid_write(db: Path) -> None:
    """A writer that changes the database and is SIGKILLed before it commits."""
    code = (
        "import os, signal, sqlite3\n"
        f"c = sqlite3.connect({str(db)!r}, isolation_level=None)\n"
        "c.execute('PRAGMA cache_size=1'); c.execute('BEGIN IMMEDIATE')\n"
        "c.execute('DELETE FROM matmul')\n"
        "for i in range(3000): c.execute(\"INSERT INTO overhead VALUES (1,'a','b',1.0,0.0,0)\")\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n")
    r = subprocess.run([sys.executable, "-c", code])
    assert r.returncode == -signal.SIGKILL


def test_a_hot_journal_is_rolled_back_before_reading(tmp_path):
    from gpuplan.compute.measured import latest_measured
    from gpuplan.measure import list_runs, save_run

    db = tmp_path / "b.sqlite"
    save_run(_run(), db)
    _kill_mid_write(db)
    journal = Path(f"{db}-journal")
    assert journal.stat().st_size > 0  # the oracle: a hot journal is there ...
    with pytest.raises(sqlite3.OperationalError, match="readonly"):  # ... and breaks a ro read
        c = sqlite3.connect(f"{db.as_uri()}?mode=ro", uri=True)
        try:
            c.execute("SELECT count(*) FROM runs").fetchone()
        finally:
            c.close()
    m = latest_measured(db, machine=KEY)  # the read path recovers it first
    assert m is not None and len(m.matmul_flops) == 3  # the DELETE was rolled back
    assert not journal.exists()
    assert len(list_runs(db)) == 1


def test_fit_and_bench_history_read_after_a_killed_writer(tmp_path, monkeypatch):
    from gpuplan.measure import save_run

    db = tmp_path / "b.sqlite"
    monkeypatch.setenv("GPUPLAN_BENCH_DB", str(db))
    save_run(_run(), db)
    _kill_mid_write(db)
    rc, out, err, _ = run_cli("bench", "--history", "--json")
    assert rc == 0, err
    assert len(json.loads(out)) == 1


def _tamper(db: Path, sql: str, *args) -> None:
    c = sqlite3.connect(db, isolation_level=None)
    c.execute(sql, args)
    c.close()


@pytest.mark.parametrize("sql,args,why,speed_reads_it", [
    ("UPDATE runs SET machine_json = ? WHERE id = 2", ("{garbage",), "machine_json is not valid",
     True),
    ("UPDATE runs SET machine_json = ? WHERE id = 2", ("[1]",), "machine_json is a JSON list", True),
    ("UPDATE runs SET notes_json = ? WHERE id = 2", ('{"a": 1}',), "notes_json is a JSON dict",
     False),
    ("UPDATE runs SET notes_json = ? WHERE id = 2", ("[1, 2]",), "hold something other than",
     False),
    ("UPDATE matmul SET median_s = ? WHERE run_id = 2", (0.0,), "median_s 0.0", True),
    ("UPDATE matmul SET median_s = ? WHERE run_id = 2", (-1.0,), "median_s -1.0", True),
    ("UPDATE bandwidth SET median_s = ? WHERE run_id = 2", (-1.0,), "median_s -1.0", True),
    ("UPDATE matmul SET size = ? WHERE run_id = 2", ("big",), "size 'big'", True),
    ("UPDATE overhead SET median_s = ? WHERE run_id = 2", ("x",), "median_s 'x'", True),
])
def test_a_damaged_latest_run_is_skipped_with_one_warning(tmp_path, sql, args, why,
                                                          speed_reads_it):
    from gpuplan.compute.measured import SkippedRunWarning, latest_measured
    from gpuplan.measure import latest_run, list_runs, save_run

    db = tmp_path / "b.sqlite"
    first = save_run(_run(created="2026-01-01T00:00:00+00:00"), db)
    save_run(_run(scale=2.0), db)
    _tamper(db, sql, *args)
    if speed_reads_it:
        with pytest.warns(SkippedRunWarning, match=f"run 2 skipped, .*{why}"):
            m = latest_measured(db, machine=KEY)
        assert m.run_id == first  # the damaged newest run is never used in a prediction
    else:  # the speed model's reader never reads the notes: run 2's rates are whole
        assert latest_measured(db, machine=KEY).run_id == 2
    with pytest.warns(SkippedRunWarning):
        assert latest_run(db, machine=KEY).run_id == first
    with pytest.warns(SkippedRunWarning):
        assert [r.run_id for r in list_runs(db)] == [first]


def test_the_cli_warns_in_one_line_and_still_answers(tmp_path, monkeypatch):
    from gpuplan.measure import save_run

    db = tmp_path / "b.sqlite"
    monkeypatch.setenv("GPUPLAN_BENCH_DB", str(db))
    save_run(_run(), db)
    _tamper(db, "UPDATE matmul SET median_s = 0 WHERE run_id = 1")
    rc, out, err, _ = run_cli("bench", "--history")
    assert rc == 0
    warn = [ln for ln in err.splitlines() if ln]
    assert len(warn) == 1 and warn[0].startswith("gpuplan: warning: ") and "run 1 skipped" in warn[0]


def test_a_corrupt_database_is_never_written(tmp_path):
    from gpuplan.measure import save_run
    from gpuplan.measure.store import StoreError

    db = tmp_path / "b.sqlite"
    for i in range(30):
        save_run(_run(created=f"2026-01-01T00:00:{i:02d}+00:00"), db)
    data = bytearray(db.read_bytes())
    page = 4096
    assert len(data) > 4 * page
    for start in range(page, len(data), page):
        data[start] = 0x07  # not a b-tree page type: every page after the first is damaged
    db.write_bytes(bytes(data))
    before = db.read_bytes()
    with pytest.raises(StoreError, match="corrupt"):
        save_run(_run(), db)
    assert db.read_bytes() == before


def test_sigkill_during_bench_writes_loses_nothing_and_reads_cleanly(tmp_path):
    """15 kills here; ``benchmarks/fuzz.py kill 200`` runs the issue's 200."""
    import fuzz_targets

    r = fuzz_targets.kill_writers(15, seed=14, db=tmp_path / "bench.sqlite")
    assert r["committed_runs"] > 0
    assert r["lost"] == 0 and r["read_failures"] == 0 and r["integrity_check"] == "ok", r
