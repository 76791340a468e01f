"""Every ``gpuplan ...`` command shown in README.md and docs/*.md runs, and the tutorial's pasted
output is what the command prints now.

- Commands are taken from the fenced code blocks (a line that starts with ``gpuplan``, ``$
  gpuplan`` or ``... && gpuplan``; a trailing ``# comment`` is dropped), run in-process through
  :func:`gpuplan.cli.main` once each (duplicates skipped), in a temporary folder that holds the
  files the docs name (``./my-model-dir``, ``./model.Q4_K_M.gguf``, ``train.py``, a Hugging Face
  cache holding ``Qwen/Qwen2.5-3B``), with an empty bench database.
- Exit status 0, or the documented error exit (:data:`EXPECTED_EXIT`).
- Commands that need a GPU, the network, a server that runs until stopped, or minutes of CPU
  (fake-tensor traces: 10-40 s of CPU each) are listed in :data:`SKIP` with the reason;
  ``GPUPLAN_DOCS_SLOW=1`` runs the slow ones too.
- docs/tutorial.md: a ```` ```console ```` block is ``$ gpuplan ...`` then its output, which must
  equal what the command prints now (line by line, trailing spaces ignored), run with an empty
  bench database; a ```` ```console measured ```` block (a measurement) or ```` ```console
  this-machine ```` block (an estimate for the CPU it runs on) is run, not compared.

After a change that moves a number on purpose: ``python tests/e2e/test_docs_commands.py --update``
rewrites the tutorial's compared blocks with the current output (review the diff).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TUTORIAL = ROOT / "docs" / "tutorial.md"
DOCS = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")))
SLOW = os.environ.get("GPUPLAN_DOCS_SLOW") == "1"

_TRACE = "a fake-tensor trace takes 10-40 s of CPU; tests/test_trace*.py and the golden trace test run them"
#: Command (as written, comment dropped) -> why it is not run here.
SKIP: dict[str, str] = {
    "gpuplan fit Qwen/Qwen2.5-3B --download": "needs the network (the Hugging Face hub)",
    "gpuplan serve --open": "starts a server that runs until stopped (tests/web covers it)",
    "gpuplan serve [--host 127.0.0.1] [--port 8000] [--open]": "a synopsis, not a command",
    "gpuplan profile [--steps N] [--warmup K] [--then stop|continue] [--json] [--plot FILE.png]":
        "a synopsis, not a command",
    "torchrun --nproc_per_node 8 -m gpuplan profile --steps 30 train.py --my-args":
        "needs torchrun with 8 processes (tests/integration/test_profile_cli.py runs a 2-rank torchrun)",
    "gpuplan trace gpt2 --device cuda": "needs a CUDA GPU",
    "gpuplan bench --sweep --plot bench.png": "minutes of measurement (tests/test_bench_*.py)",
    "gpuplan bench --sweep --plot b.png": "minutes of measurement (tests/test_bench_*.py)",
}
#: Commands that are slow but runnable: run with GPUPLAN_DOCS_SLOW=1.
SLOW_PREFIXES = ("gpuplan trace ",)
SLOW_COMMANDS = {"gpuplan fit gpt2 --batch 4 --seq 1024 --trace"}
#: Documented error exits: command -> (exit status, why).
EXPECTED_EXIT: dict[str, int] = {
    "gpuplan gpus H100-SXM": 2,   # docs/gpus.md: "unknown: one line with the closest SKUs"
}
#: Commands that ask for a CUDA device by name: exit 2 (one line) where there is none.
NEEDS_CUDA = {"gpuplan bench --size 8192 --dtype bf16 --device cuda:0"}


# -- finding the commands -------------------------------------------------------------------------

@dataclass(frozen=True)
class Block:
    """A fenced code block: its info string and its lines."""

    info: str
    lines: tuple[str, ...]
    start: int
    """Index of the block's first line in the file (after the fence)."""


def blocks(text: str) -> list[Block]:
    out, lines, i = [], text.splitlines(), 0
    while i < len(lines):
        m = re.match(r"^(\s*)```(.*)$", lines[i])
        if not m:
            i += 1
            continue
        j = i + 1
        while j < len(lines) and not lines[j].strip().startswith("```"):
            j += 1
        out.append(Block(m.group(2).strip(), tuple(lines[i + 1:j]), i + 1))
        i = j + 1
    return out


def command_of(line: str) -> str | None:
    """The gpuplan command a code line shows, without a trailing comment; None if none."""
    s = line.strip()
    if s.startswith("$ "):
        s = s[2:]
    if "&& gpuplan " in s:
        s = "gpuplan " + s.split("&& gpuplan ", 1)[1]
    if not (s.startswith("gpuplan ") or s.startswith("torchrun ") and "-m gpuplan" in s):
        return None
    s = re.sub(r"\s+#.*$", "", s)
    return " ".join(s.split())


def _joined(lines: tuple[str, ...]) -> list[str]:
    """The block's lines with shell continuations (a trailing backslash) joined into one."""
    out: list[str] = []
    carry = ""
    for line in lines:
        if line.rstrip().endswith("\\"):
            carry += line.rstrip()[:-1] + " "
            continue
        out.append(carry + line)
        carry = ""
    if carry:
        out.append(carry)
    return out


def doc_commands() -> list[str]:
    """Every command of README.md and docs/*.md, first occurrence first, no duplicates."""
    seen: dict[str, None] = {}
    for doc in DOCS:
        for b in blocks(doc.read_text()):
            for line in _joined(b.lines):
                if b.info.startswith("console") and not line.startswith("$ "):
                    continue   # a command's pasted output, not a command
                c = command_of(line)
                if c is not None and c not in SKIP and re.search(r"\[--[^\]]*\]", c):
                    c = re.sub(r"\[(--[^\]]*)\]", r"\1", c)   # a synopsis: run with every option
                if c is not None:
                    seen.setdefault(c)
    return list(seen)


@dataclass(frozen=True)
class Pasted:
    """A tutorial block: the command and the output pasted under it."""

    command: str
    output: tuple[str, ...]
    measured: bool
    start: int


def tutorial_blocks(text: str | None = None) -> list[Pasted]:
    text = TUTORIAL.read_text() if text is None else text
    out = []
    for b in blocks(text):
        words = b.info.split()
        if not words or words[0] != "console" or not b.lines:
            continue
        first = b.lines[0]
        assert first.startswith("$ gpuplan "), f"docs/tutorial.md:{b.start + 1}: {first!r}"
        out.append(Pasted(" ".join(first[2:].split()), b.lines[1:], len(words) > 1, b.start))
    return out


# -- running them ---------------------------------------------------------------------------------

def run(command: str) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of one command, in-process."""
    from gpuplan.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(shlex.split(command)[1:])
        except SystemExit as e:  # argparse
            rc = e.code if isinstance(e.code, int) else 1
    return rc, out.getvalue(), err.getvalue()


def _has_cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def _needs_torch(command: str) -> bool:
    return command.split()[1] in ("trace", "bench", "profile") and not any(
        f in command for f in ("--history", "--compare", "--show")) or "--trace" in command


def _torch_there() -> bool:
    try:
        import torch  # noqa: F401
    except ImportError:
        return False
    return True


def _why_not(command: str) -> str | None:
    if command in SKIP:
        return SKIP[command]
    if not SLOW and (command in SLOW_COMMANDS or command.startswith(SLOW_PREFIXES)):
        return _TRACE + " (GPUPLAN_DOCS_SLOW=1 runs it)"
    if _needs_torch(command) and not _torch_there():
        return "needs torch (pip install 'gpuplan[torch]')"
    return None


# -- the files the docs name ----------------------------------------------------------------------

TINY = {"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 1,
        "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 128,
        "vocab_size": 96, "max_position_embeddings": 256, "tie_word_embeddings": False,
        "torch_dtype": "float16"}


def _tiny_safetensors(path: Path) -> None:
    np = pytest.importorskip("numpy")
    st = pytest.importorskip("safetensors.numpy")
    H, I, V, KVD, p = 64, 128, 96, 32, "model.layers.0"
    shapes = {"model.embed_tokens.weight": (V, H), "model.norm.weight": (H,),
              "lm_head.weight": (V, H), f"{p}.input_layernorm.weight": (H,),
              f"{p}.post_attention_layernorm.weight": (H,), f"{p}.self_attn.q_proj.weight": (H, H),
              f"{p}.self_attn.k_proj.weight": (KVD, H), f"{p}.self_attn.v_proj.weight": (KVD, H),
              f"{p}.self_attn.o_proj.weight": (H, H), f"{p}.mlp.gate_proj.weight": (I, H),
              f"{p}.mlp.up_proj.weight": (I, H), f"{p}.mlp.down_proj.weight": (H, I)}
    st.save_file({k: np.zeros(s, dtype=np.float16) for k, s in shapes.items()}, str(path))


def _model_dir(path: Path) -> None:
    path.mkdir()
    (path / "config.json").write_text(json.dumps(TINY))
    _tiny_safetensors(path / "model.safetensors")


def _hub_cache(root: Path, repo_id: str) -> Path:
    """A cache in huggingface_hub's layout holding ``repo_id``'s config.json (tiny numbers: the
    command shows that a hub id resolves from the cache, not the 14B model's size)."""
    rev = "0123456789abcdef0123456789abcdef01234567"
    repo = root / ("models--" + repo_id.replace("/", "--"))
    (repo / "snapshots" / rev).mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(rev)
    (repo / "snapshots" / rev / "config.json").write_text(json.dumps(TINY))
    return root


def _gguf(path: Path) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit"))
    try:
        from test_gguf import _write  # the test that writes a .gguf with the gguf package
    finally:
        sys.path.pop(0)
    _write(path)


def _train_script() -> str:
    """The tutorial's own train.py (its ```python block), so the doc shows what was profiled."""
    for b in blocks(TUTORIAL.read_text()):
        if b.info == "python" and b.lines and b.lines[0].startswith("# train.py"):
            return "\n".join(b.lines) + "\n"
    raise AssertionError("docs/tutorial.md has no ```python block starting with '# train.py'")


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    """A folder holding every file the docs' commands name, made the working directory."""
    d = tmp_path_factory.mktemp("docs")
    _model_dir(d / "my-model-dir")
    (d / "train.py").write_text(_train_script())
    files = {"gguf": lambda: _gguf(d / "model.Q4_K_M.gguf"),
             "hub": lambda: _hub_cache(d / "hub", "Qwen/Qwen2.5-3B")}
    for make in files.values():
        with contextlib.suppress(pytest.skip.Exception):
            make()
    old, env = os.getcwd(), dict(os.environ)
    os.chdir(d)
    os.environ["GPUPLAN_BENCH_DB"] = str(d / "bench.sqlite")
    os.environ["HF_HUB_CACHE"] = str(d / "hub")
    hub = sys.modules.get("huggingface_hub.constants")
    saved = None if hub is None else hub.HF_HUB_CACHE
    if hub is not None:
        hub.HF_HUB_CACHE = str(d / "hub")
    yield d
    if hub is not None:
        hub.HF_HUB_CACHE = saved
    os.chdir(old)
    os.environ.clear()
    os.environ.update(env)


# -- the tests ------------------------------------------------------------------------------------

def _order(commands: list[str]) -> list[str]:
    """Bench runs before the commands that read stored runs (--history, --compare, --show)."""
    reads = ("--history", "--compare", "--show")
    return ([c for c in commands if not any(r in c for r in reads)]
            + [c for c in commands if any(r in c for r in reads)])


def test_commands_are_found():
    cmds = doc_commands()
    assert "gpuplan fit" in cmds                       # the README's quick start
    assert len(cmds) >= 60, len(cmds)
    assert all(c.split()[0] in ("gpuplan", "torchrun") for c in cmds)
    assert set(SKIP) <= set(cmds), sorted(set(SKIP) - set(cmds))   # no stale skip entries


def test_every_doc_command_runs(workdir):
    failures, ran, skipped = [], 0, []
    pasted = {p.command for p in tutorial_blocks() if not p.measured}
    for command in _order(doc_commands()):
        if command in pasted:
            continue   # test_tutorial_output_is_current runs it and compares its output
        # (the tutorial's measured blocks run here: its bench run is the second stored run
        # that `bench --compare latest~1 latest` needs)
        why = _why_not(command)
        if why:
            skipped.append(f"{command}: {why}")
            continue
        expected = EXPECTED_EXIT.get(command, 2 if command in NEEDS_CUDA and not _has_cuda() else 0)
        rc, out, err = run(command)
        ran += 1
        if rc != expected:
            failures.append(f"{command}: exit {rc}, expected {expected}: {err.strip()[-300:]}")
        elif rc == 2 and (len(err.strip().splitlines()) != 1 or "Traceback" in err):
            failures.append(f"{command}: the error is not one line: {err!r:.300}")
    print(f"\nran {ran} commands; skipped:\n  " + "\n  ".join(skipped))
    assert not failures, "\n".join(failures)


def test_tutorial_output_is_current(workdir, monkeypatch):
    """Each pasted output equals the command's output now, with no stored bench run (measured
    blocks run in test_every_doc_command_runs)."""
    problems = []
    monkeypatch.setenv("GPUPLAN_BENCH_DB", str(workdir / "never-written.sqlite"))
    for p in tutorial_blocks():
        if p.measured:
            continue
        with _recorded_cpu():
            rc, out, err = run(p.command)
        if rc != 0:
            problems.append(f"$ {p.command}: exit {rc}: {err.strip()[-300:]}")
            continue
        now = [line.rstrip() for line in out.rstrip("\n").splitlines()]
        doc = [line.rstrip() for line in p.output]
        if now != doc:
            first = next((i for i, (a, b) in enumerate(zip(doc, now)) if a != b),
                         min(len(doc), len(now)))
            problems.append(f"$ {p.command} (docs/tutorial.md:{p.start + 1 + first + 1}): the doc "
                            f"says {doc[first] if first < len(doc) else '<end>'!r}, the command "
                            f"prints {now[first] if first < len(now) else '<end>'!r}")
    assert not problems, ("docs/tutorial.md is out of date (python tests/e2e/test_docs_commands.py "
                          "--update rewrites it):\n" + "\n".join(problems))


def test_tutorial_tells_the_seed_story():
    """The numbers the seed states are in the tutorial's pasted output, not only in its prose."""
    pasted = "\n".join("\n".join(p.output) for p in tutorial_blocks() if not p.measured)
    for figure in ("14.0 GB", "28.0 GB", "56.0 GB", "112.0 GB", "8.0x"):
        assert figure in pasted, figure
    commands = " ".join(p.command for p in tutorial_blocks())
    for needed in ("--suggest", "--checkpointing", "--lora-rank", "--zero", "speed", "flops",
                   "--vs-cpu", "bench", "profile"):
        assert needed in commands, needed


# -- rewriting the tutorial -----------------------------------------------------------------------

def _recorded_cpu():
    """The CPU the pasted outputs were made on (``flops matmul`` prints a row for the host's CPU):
    the golden set's pinned CPU, so the tutorial reads the same on any machine."""
    sys.path.insert(0, str(ROOT / "tests" / "golden"))
    from record import recorded_cpu

    return recorded_cpu()


def update(path: Path = TUTORIAL) -> int:
    """Rewrite the output of every compared block with what the command prints now."""
    lines = path.read_text().splitlines()
    changed = 0
    for p in reversed(tutorial_blocks(path.read_text())):
        if p.measured:
            continue
        with _recorded_cpu():
            rc, out, err = run(p.command)
        if rc != 0:
            raise SystemExit(f"$ {p.command}: exit {rc}: {err}")
        new = [line.rstrip() for line in out.rstrip("\n").splitlines()]
        begin = p.start + 1
        if lines[begin:begin + len(p.output)] != new:
            lines[begin:begin + len(p.output)] = new
            changed += 1
    path.write_text("\n".join(lines) + "\n")
    return changed


if __name__ == "__main__":
    if sys.argv[1:] != ["--update"]:
        raise SystemExit("usage: python tests/e2e/test_docs_commands.py --update")
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        os.environ["GPUPLAN_BENCH_DB"] = str(Path(tmp) / "empty.sqlite")
        print(f"{update()} block(s) rewritten in {TUTORIAL.relative_to(ROOT)}")
