"""Bounded work for every capacity input (issue qa42): the requests one simulation serves and
the steps it runs are capped with a one-line reason, the search never tries more replicas than
there are requests (or clients), and fit's notes name options as the command line spells them."""

from __future__ import annotations

import time

import pytest

from gpuplan import Job, get_gpu, load_model
from gpuplan.capacity import _sim
from gpuplan.capacity._plan import Deployment
from gpuplan.capacity._result import SLO
from gpuplan.capacity._search import search
from gpuplan.capacity._workload import Dist, make_workload
from gpuplan.cli import main
from gpuplan.errors import InputError

CAP = ["capacity", "llama-3.1-8b", "--gpu", "H100-SXM-80GB"]


def _err(capsys, argv) -> str:
    t0 = time.perf_counter()
    assert main(argv) == 2
    assert time.perf_counter() - t0 < 5  # refused up front, not after the simulation
    err = capsys.readouterr().err.strip()
    assert err.startswith("gpuplan: error:") and "\n" not in err
    return err


def test_a_million_requests_is_refused_at_once_naming_the_cap(capsys):
    # it ran ~290 s and took ~3.5 GB (about 85 us and 1 KB a request on this machine)
    err = _err(capsys, CAP + ["--rate", "10", "--requests", "1000000"])
    assert "--requests 1000000" in err and "100000" in err and "or fewer" in err
    with pytest.raises(InputError, match="requests"):
        make_workload(input=Dist("fixed", 10), output=Dist("fixed", 2), requests=100_001,
                      rate=10.0)


def test_the_cap_itself_is_accepted():
    wl = make_workload(input=Dist("fixed", 10), output=Dist("fixed", 2), requests=100_000,
                       rate=10.0)
    assert len(wl.requests) == 100_000


def test_outputs_too_long_for_the_kv_cache_are_refused_before_simulating(capsys):
    # 2,000 requests of 130,000 output tokens on one H100 (KV 454,080 tokens: at most 3 such
    # requests at once) need at least 2000 * 130000 / 3 = 8.7e7 decode steps (~6 minutes)
    err = _err(capsys, CAP + ["--tp", "1", "--rate", "10", "--input", "100", "--output",
                              "130000"])
    assert "--requests" in err and "--output" in err and "steps" in err


def test_a_simulation_stops_at_its_step_budget(monkeypatch):
    # at a vanishing rate each request decodes alone: 40 requests x 64 tokens = 2,560+ steps,
    # which no lower bound from concurrency foresees; the loop itself stops at the budget
    model = load_model("llama-3.1-8b")
    dep = Deployment(model, get_gpu("h100"), Job(model="x", mode="infer"), max_model_len=4096)
    wl = make_workload(input=Dist("fixed", 100), output=Dist("fixed", 64), requests=40,
                       rate=0.001)
    assert dep.run(wl).steps >= 40 * 64
    monkeypatch.setattr(_sim, "MAX_SIM_STEPS", 1000)
    with pytest.raises(InputError, match="1000 steps"):
        dep.run(wl)


def _replicas_tried(monkeypatch, requests: int, **load) -> list[int]:
    """The replica counts the search runs for ``requests`` requests at ``load`` (a rate or a
    concurrency), under an SLO nothing meets."""
    model = load_model("llama-3.1-8b")
    tried = []
    run = Deployment.run

    def spy(self, wl, **kw):
        tried.append(self.replicas)
        return run(self, wl, **kw)

    monkeypatch.setattr(Deployment, "run", spy)
    wl = make_workload(input=Dist("fixed", 100), output=Dist("fixed", 4), requests=requests,
                       **load)
    with pytest.raises(InputError, match="meets the SLO"):
        search(model, get_gpu("h100"), Job(model="x", mode="infer"), wl,
               SLO(ttft_s=1e-6), max_model_len=4096)
    return tried


def test_the_search_never_tries_more_replicas_than_requests(monkeypatch):
    # 3 requests and an SLO nothing meets: the bisection went up to 64 // TP replicas (the
    # error named "TP 8 x PP 1 x 8 replicas" for 3 requests)
    tried = _replicas_tried(monkeypatch, 3, rate=1.0)
    assert tried and max(tried) == 3


def test_the_search_never_tries_more_replicas_than_clients(monkeypatch):
    tried = _replicas_tried(monkeypatch, 20, concurrency=2)
    assert tried and max(tried) == 2


def test_fit_notes_name_the_cli_option(capsys):
    # a T4 has no bf16: the speed table's note said "use infer_precision fp16", the library's
    # keyword, where the command line takes --infer-precision
    assert main(["fit", "llama-3.1-8b", "--mode", "infer", "--gpu", "t4"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "use --infer-precision fp16" in out and "infer_precision" not in out


# -- found as a hostile user (qa42) --------------------------------------------------------------

def test_max_rate_without_an_slo_names_the_options(capsys):
    # it said "(slo_ttft, slo_tpot or slo_e2e) ... (input, output)": the library's keywords
    err = _err(capsys, CAP + ["--tp", "1", "--rate", "10", "--max-rate", "--requests", "5"])
    assert "--slo-ttft" in err and "--max-rate" in err and "slo_ttft" not in err


def test_the_web_names_the_largest_seed_as_the_cli_does():
    # the web said "<= 2.14748e+09" where the CLI says "<= 2^31 - 1"
    from gpuplan.web._service import capacity

    with pytest.raises(InputError) as e:
        capacity({"model": "llama-3.1-8b", "gpu": "H100-SXM-80GB", "rate": 1, "requests": 5,
                  "tp": 1, "seed": -1})
    assert "2^31 - 1" in str(e.value) and "e+09" not in str(e.value)


def test_a_whole_bound_is_shown_whole():
    from gpuplan.bounds import check_int

    with pytest.raises(InputError, match="<= 123456789"):
        check_int(123456790, "int", high=123456789)


@pytest.mark.parametrize("line,said", [
    ('{"arrival_s": 0, "input_tokens": ' + "9" * 5000 + ', "output_tokens": 4}', "digits"),
    ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
])
def test_a_hostile_workload_line_is_one_line_not_a_traceback(capsys, tmp_path, line, said):
    # a 5,000-digit integer raised AttributeError (a ValueError has no .msg); deep nesting a
    # RecursionError
    f = tmp_path / "w.jsonl"
    f.write_text(line + "\n")
    err = _err(capsys, CAP + ["--tp", "1", "--workload", str(f)])
    assert "line 1" in err and said in err


def test_a_config_with_a_huge_integer_says_so_in_the_users_terms(capsys, tmp_path):
    # the message ended "use sys.set_int_max_str_digits() to increase the limit"
    (tmp_path / "config.json").write_text('{"hidden_size": ' + "9" * 5000 + "}")
    err = _err(capsys, ["fit", str(tmp_path), "--gpu", "h100"])
    assert "5000 digits" in err and "sys." not in err


@pytest.mark.parametrize("text,said", [("[" * 100_000 + "]" * 100_000, "nested too deeply"),
                                       ('{"hidden_size": ' + "9" * 5000 + "}", "5000 digits")])
def test_the_trace_reads_a_hostile_config_as_one_line(tmp_path, text, said):
    # `gpuplan trace DIR` raised RecursionError / ValueError from json.loads (after torch's import)
    from gpuplan.errors import ModelFileError
    from gpuplan.trace._spec import _read_config

    (tmp_path / "config.json").write_text(text)
    with pytest.raises(ModelFileError, match=said):
        _read_config(tmp_path / "config.json")


@pytest.mark.parametrize("name,said", [("x.txt", ".png"), ("no/such/dir/x.png", "does not exist")])
def test_capacity_checks_its_plot_before_any_work(capsys, tmp_path, name, said):
    # fit refuses these at once; capacity simulated, then wrote a PNG into x.txt or failed at the
    # end
    err = _err(capsys, CAP + ["--tp", "1", "--rate", "1", "--requests", "5", "--plot",
                              str(tmp_path / name)])
    assert "--plot" in err and said in err
    assert not (tmp_path / name).exists()


def test_capacity_never_says_it_wrote_a_plot_it_did_not(capsys, tmp_path):
    # with a trace there is no rate to sweep: it printed "plot written to ..." and wrote nothing
    wl = tmp_path / "w.jsonl"
    wl.write_text('{"arrival_s": 0, "input_tokens": 100, "output_tokens": 4}\n')
    err = _err(capsys, CAP + ["--tp", "1", "--workload", str(wl), "--plot",
                              str(tmp_path / "p.png")])
    assert "--plot" in err and "--workload" in err
    assert not (tmp_path / "p.png").exists()


def test_capacity_plots_the_deployment_a_search_chose(capsys, tmp_path):
    # after a search (an SLO, no layout) it printed "plot written to ..." and wrote nothing
    pytest.importorskip("matplotlib")
    p = tmp_path / "s.png"
    assert main(CAP + ["--rate", "1", "--requests", "20", "--input", "100", "--output", "4",
                       "--slo-ttft", "1", "--max-model-len", "4096", "--plot", str(p)]) == 0
    assert f"plot written to {p}" in capsys.readouterr().out
    assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_capacity_refuses_a_plot_of_a_disaggregated_split(capsys, tmp_path):
    err = _err(capsys, CAP + ["--rate", "1", "--requests", "20", "--input", "100", "--output",
                              "4", "--slo-ttft", "1", "--max-model-len", "4096",
                              "--disaggregated", "--plot", str(tmp_path / "d.png")])
    assert "--plot" in err and "--disaggregated" in err
    assert not (tmp_path / "d.png").exists()


def test_capacity_refuses_a_rate_plot_of_a_closed_loop(capsys, tmp_path):
    # its seven "rates" were seven runs of the same C clients: one latency drawn seven times
    err = _err(capsys, CAP + ["--tp", "1", "--concurrency", "4", "--requests", "20", "--plot",
                              str(tmp_path / "c.png")])
    assert "--plot" in err and "--concurrency" in err and "--sweep" in err


def test_a_pipeline_over_two_nodes_pays_the_network_at_its_middle_boundary(capsys):
    # TP1 PP4 DP4 on 16 GPUs, 8 a node (Megatron's tp-cp-dp-pp order: stages 4 ranks apart, the
    # chain 0-4-8-12): stage 1 -> 2 crosses the nodes. Each boundary was timed as the first
    # pair's (0-4, NVLink), so a 1 Gb/s network cost the pipeline nothing. Every micro-batch
    # crosses every boundary: the exposed sends are at least 2 x 4 micro-batches x one
    # activation (1 x 2048 x 4096 x 2 B = 16,777,216 B) over 1 Gb/s (1.25e8 B/s) = 1.07 s.
    import json

    assert main(["speed", "llama-3.1-8b", "--gpu", "h100", "--mode", "train", "--pp", "4",
                 "--gpus", "16", "--grad-accum", "4", "--inter-node", "1Gb/s",
                 "--no-measured", "--json"]) == 0
    lay = json.loads(capsys.readouterr().out)["layout"]
    assert lay["pp_comm_exposed_s"] >= 8 * 16_777_216 / 1.25e8
    assert "1 Gb/s" in lay["links"]["pp"]


def test_an_astronomical_duration_is_printed_short(capsys):
    # --link 1e-300 (GB/s) on 2 GPUs: a 2e301 s step printed as a 300-digit number of days
    from gpuplan.units import format_seconds

    assert format_seconds(2e301) == "2.31e+296 days"  # 2e301 / 86,400 = 2.3148e296
    assert format_seconds(259200) == "3.0 days"  # below 10^6 days: as before
    assert main(["speed", "llama-3.1-8b", "--gpu", "h100", "--gpus", "2", "--link", "1e-300",
                 "--no-measured"]) == 0
    import re

    assert not re.search(r"[0-9]{30}", capsys.readouterr().out)


def test_serve_names_a_host_or_port_it_cannot_bind(capsys):
    # uvicorn logged "ERROR: [Errno -2] Name or service not known" (or 98, in use) and exited 3,
    # after a warning that the unresolvable host exposed the planner
    import socket

    pytest.importorskip("uvicorn")
    err = _err(capsys, ["serve", "--host", "a b"])
    assert "--host 'a b'" in err and "warning" not in err
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        err = _err(capsys, ["serve", "--port", str(port)])
    assert f"--port {port}" in err and "127.0.0.1" in err
