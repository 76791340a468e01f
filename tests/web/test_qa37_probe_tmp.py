import pytest
CASES = [
 ("fit", ["gpt-oss-120b","--mode","infer","--engine","sglang","--gpu","H100-SXM-80GB","--gpu","A100-SXM-80GB"],
  {"model":"gpt-oss-120b","mode":"infer","engine":"sglang","gpu":["H100-SXM-80GB","A100-SXM-80GB"]}),
 ("fit", ["deepseek-r1","--mode","infer","--engine","vllm","--gpu","MI300X","--gpus","8","--tp","8"],
  {"model":"deepseek-r1","mode":"infer","engine":"vllm","gpu":["MI300X"],"gpus":8,"tp":8}),
 ("speed", ["gpt-oss-120b","--mode","infer","--engine","vllm","--gpu","A100-SXM-80GB"],
  {"model":"gpt-oss-120b","mode":"infer","engine":"vllm","gpu":["A100-SXM-80GB"]}),
 ("speed", ["gpt-oss-120b","--mode","infer","--engine","trt-llm","--gpu","T4"],
  {"model":"gpt-oss-120b","mode":"infer","engine":"trt-llm","gpu":["T4"]}),
 ("speed", ["llama-3.1-8b","--mode","infer","--engine","vllm","--gpu","H100-SXM-80GB","--kv-dtype","fp8","--fp8-attention"],
  {"model":"llama-3.1-8b","mode":"infer","engine":"vllm","gpu":["H100-SXM-80GB"],"kv_dtype":"fp8","fp8_attention":True}),
 ("speed", ["deepseek-v3","--mode","infer","--gpu","H100-SXM-80GB","--gpu","A100-SXM-80GB","--gpus","16","--tp","16"],
  {"model":"deepseek-v3","mode":"infer","gpu":["H100-SXM-80GB","A100-SXM-80GB"],"gpus":16,"tp":16}),
]

import json
@pytest.mark.parametrize("cmd,argv,body", CASES)
def test_probe(client, cli_json, cmd, argv, body, capsys):
    from gpuplan.cli import main
    r = client.post(f"/api/{cmd}", json=body)
    capsys.readouterr()
    rc = main([cmd, *argv, "--json"]); o = capsys.readouterr()
    w = r.json()
    with open("/tmp/qa37_probe.txt", "a") as f:
        f.write(f"== {cmd} {argv}\n web {r.status_code}: {json.dumps(w)[:200]}\n cli rc {rc}: {o.err[-200:]}\n")
        if rc == 0 and r.status_code == 200:
            c = json.loads(o.out)
            if cmd == "speed":
                f.write(f" cli tok/s {c.get('tokens_per_s')} keys {list(c)[:12]}\n web tok/s {w.get('infer',{}).get('estimate',{}).get('tokens_per_s')}\n")
            else:
                f.write(f" same {c == w}\n")
