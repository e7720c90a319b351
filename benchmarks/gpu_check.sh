#!/usr/bin/env bash
# The GPU checks and figures, each part time-limited, the most wanted first. "checks" (under 10
# minutes on one H100): the GPU-marked tests, stacked seeds against one by one (plain and
# captured), the default run with --capture timed whole, the loop end to end at the cpu and
# paper presets (plain and captured), a loop step split by benchmarks.profile_loop. "study": a
# 3-seed x 4-arm worlds study at the study preset, each arm's seeds stacked and captured, the
# four arms at once (--workers 4, a process each), timed whole (the target: under 5 minutes).
# Figures go to docs/throughput.md#on-a-gpu-one-nvidia-h100.
#
#   bash benchmarks/gpu_check.sh [OUT_DIR] [checks|study]   # OUT_DIR (default gpu-check/): log, JSON
set -u
out=${1:-gpu-check}
what=${2:-checks}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 SDL_VIDEODRIVER=dummy
python -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" || {
    echo "gpu_check: torch sees no CUDA device" >&2; exit 2; }
part() { echo; echo "== $1 ($(date +%T))"; }
if [ "$what" = study ]; then
    part "worlds study, study preset, 3 seeds x 4 arms, stacked and captured, 4 arms at once"
    ( time timeout 540 python -m runners.worlds_study --device cuda --stack --preset study \
        --tracks A C D --oracle-track D --seeds 42 43 44 --out "$out/study" --capture \
        --workers 4 ) 2>&1 |
        tee "$out/study.log" | grep -E "stacked set|started|skipped|report:|real|error|rror" 
    exit 0
fi
{
nvidia-smi -L
python -c "import torch; print('torch', torch.__version__)"
part "GPU-marked tests"
timeout 75 python -m pytest -q -m gpu tests -p no:cacheprovider --tb=short 2>&1 |
    grep -E "^E  |FAILED|passed|failed" | head -40
for cap in "" "--bench-capture"; do
    part "stacked seeds, paper preset ${cap:+(captured)}"
    timeout 100 python -m pytest -q benchmarks/test_stacked_speed.py --benchmark-only -s \
        --device cuda --bench-preset paper --bench-tracks C --bench-seeds 1,16,64 \
        --bench-rounds 3 --bench-warmup 1 $cap -p no:cacheprovider -k "not (one and 64)" \
        --benchmark-json "$out/stacked${cap:+-captured}.json" 2>&1 | grep -E "seed-steps|passed|failed|rror"
done
part "the default run, captured (the floor and the ceiling beside it, a process each)"
( time timeout 120 python -m runners.train_online --device cuda --capture \
    --set stream_cache=false --out "$out/runs" ) 2>&1 | tail -6
for preset in cpu paper; do
    for cap in "" "--bench-capture --bench-set stream_cache=false"; do
        part "loop end to end, $preset preset ${cap:+(captured)}"
        timeout 45 python -m pytest -q benchmarks/test_end_to_end.py --benchmark-only \
            --device cuda --bench-tracks C --bench-precision bf16 -k "worlds or paper-stream" \
            --bench-preset "$preset" --bench-rounds 3 --bench-warmup 1 $cap -p no:cacheprovider \
            --benchmark-json "$out/e2e-$preset${cap:+-captured}.json" 2>&1 | grep -E "passed|failed|rror"
    done
done
part "a loop step split (paper preset, captured)"
timeout 45 python -m benchmarks.profile_loop --device cuda --preset paper --protocol paper --capture
} 2>&1 | tee "$out/log"
