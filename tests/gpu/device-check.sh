#!/usr/bin/env bash
# hc's GPU paths on a lent GPU machine, in one bounded run (the `device` tool runs it from the
# repository root with $OUT for what comes back). Installs hc's own dependencies from wheels
# carried in .whl/ (the machine cannot fetch; its python3 already has torch with CUDA), then:
# the GPU tests (NVML checks, the torch sweep on NCCL alone and under torchrun), `hc node
# --local` with the embedded config, and diagnosis on real NCCL and CUDA jobs: a hung NCCL
# collective live (py-spy) and from its saved output (the watchdog's post-mortem), and a
# torchrun job whose rank 1 raises, through `hc run` and `hc diagnose logs`.
set -uo pipefail
OUT=${OUT:-/tmp/hc-device-out}
mkdir -p "$OUT/cap"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1
hc() { python3 -m healthcheck "$@"; }
step() { echo; echo "=== $* ($(date +%T))"; }

step versions
nvidia-smi -L; python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", torch.cuda.nccl.version())'
hc --version; py-spy --version

step "hc node --local (embedded config)"
timeout 120 python3 -m healthcheck node --local --format json > "$OUT/cap/node-local.json"; echo "rc=$?"
python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); [print(f["status"], f["id"], f["message"][:140]) for n in r["nodes"] for f in n["findings"]]' "$OUT/cap/node-local.json" | head -40

step "GPU tests"
timeout 300 python3 -m pytest -q -n 0 -p no:cacheprovider -m gpu tests/gpu 2>&1 | tail -15

step "NCCL hang: live, then from its saved output"
d=/tmp/hang; mkdir -p $d
MASTER_ADDR=127.0.0.1 MASTER_PORT=29641 RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 TORCH_FR_BUFFER_SIZE=2000 \
  TORCH_NCCL_DUMP_ON_TIMEOUT=1 TORCH_FR_DUMP_TEMP_FILE=$d/nccl_trace_rank_ NCCL_DEBUG=INFO NCCL_DEBUG_FILE=$d/nccl.%h.%p.log \
  timeout -s KILL 90 python3 tests/gpu/jobs/nccl_hang.py 8 > $d/rank0.out 2>&1 &
job=$!
for _ in $(seq 60); do grep -q "warm-up" $d/rank0.out 2>/dev/null && break; sleep 0.5; done
sleep 2
timeout 60 python3 -m healthcheck diagnose pids --local --format json --timeout 20 > "$OUT/cap/hang-live.json"; echo "live rc=$?"
python3 -c 'import json,sys; v=json.load(open(sys.argv[1])); print(v.get("class"), v.get("odd_ranks"), v.get("summary","")[:300])' "$OUT/cap/hang-live.json"
wait $job; echo "job rc=$?"
timeout 60 python3 -m healthcheck diagnose logs $d --format json > "$OUT/cap/hang-logs.json"; echo "logs rc=$?"
python3 -c 'import json,sys; v=json.load(open(sys.argv[1])); print(v.get("class"), v.get("odd_ranks"), v.get("summary","")[:300])' "$OUT/cap/hang-logs.json"
cp $d/rank0.out "$OUT/cap/nccl-hang-rank0.out"; ls -la $d

step "torchrun job whose rank 1 raises, under hc run"
r=/tmp/run; mkdir -p $r
HC_TEST_DYING_RANK=1 timeout 120 python3 -m healthcheck run --log-dir $r -- torchrun --standalone --nproc-per-node 3 \
  tests/gpu/jobs/rank_exception.py > $r/console.txt 2>&1; echo "job rc=$?"
tail -5 $r/console.txt
timeout 60 python3 -m healthcheck diagnose logs $r --format json > "$OUT/cap/exception-logs.json"; echo "logs rc=$?"
python3 -c 'import json,sys; v=json.load(open(sys.argv[1])); print(v.get("class"), v.get("odd_ranks"), v.get("summary","")[:300])' "$OUT/cap/exception-logs.json"
cp $r/console.txt "$OUT/cap/exception-console.txt"
tar -C /tmp -czf "$OUT/captures.tgz" hang run 2>/dev/null
echo; echo "=== done $(date +%T)"
