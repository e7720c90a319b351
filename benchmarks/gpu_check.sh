#!/usr/bin/env bash
# The GPU checks and figures, each part time-limited, the most wanted first; each mode fits one
# call of under 10 minutes on one H100.
#   figures: the GPU-marked tests, stacked seeds at the paper preset (captured), the loop end to
#            end at the paper preset (captured), the default run timed whole.
#   tests:   every GPU-marked test, then a loop step split by benchmarks.profile_loop (paper
#            preset, captured).
#   study:   a 3-seed x 4-arm worlds study at the cpu preset (--settle None: the stacked,
#            captured step has no reservoir), each arm's seeds stacked and captured, the four
#            arms at once (--workers 4, a process each), timed whole (the target: under 5
#            minutes).
#   world:   the world model on a GPU: the default run, timed whole (against the 2-core
#            CPU's), then the same learner fed 8x the windows a step (--preset gpu: 512
#            streams, 64 worlds) for 6,000 steps, its floor and oracle beside it: does the oracle's
#            margin grow with the windows (docs/results.md, "A world model that uses what it is
#            told")? Then the stacked seeds (as in figures, shorter limits). The run folders'
#            summaries and configs come back as runs.tar.gz.
# Figures go to docs/throughput.md#on-a-gpu-one-nvidia-h100.
#
#   bash benchmarks/gpu_check.sh [OUT_DIR] [figures|tests|study|world] [RUN_OPTION ...]
# OUT_DIR defaults to gpu-check/; the study passes any RUN_OPTION (e.g. --set regularise=latents) to
# every run.
set -u
out=${1:-gpu-check}
what=${2:-figures}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 SDL_VIDEODRIVER=dummy
python -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" || {
    echo "gpu_check: torch sees no CUDA device" >&2; exit 2; }
part() { echo; echo "== $1 ($(date +%T))"; }
bench() {  # bench SECONDS FILE JSON_NAME ARGS...: one benchmark module on the GPU
    local limit=$1 file=$2 name=$3; shift 3
    timeout "$limit" python -m pytest -q -s "benchmarks/$file" --benchmark-only --device cuda \
        --bench-tracks C --bench-rounds 3 --bench-warmup 1 -p no:cacheprovider \
        --benchmark-json "$out/$name.json" "$@" 2>&1 | grep -E "seed-steps|passed|failed|rror"
    [ -s "$out/$name.json" ] && python -m benchmarks.make_table "$out/$name.json" | grep "^|"
}
stacked() {  # stacked SECONDS: seeds stacked at the paper preset, captured
    part "stacked seeds, paper preset (captured)"
    bench "$1" test_stacked_speed.py stacked-captured --bench-preset paper --bench-seeds 1,16,64 \
        --bench-capture -k "not (one and 64)"
}
case "$what" in
study)
    part "worlds study, cpu preset, 3 seeds x 4 arms, stacked and captured, 4 arms at once"
    ( time timeout 540 python -m runners.study worlds --device cuda --stack --settle None \
        --tracks A C D --oracle-track D --seeds 42 43 44 --out "$out/study" --capture \
        --workers 4 "${@:3}" ) 2>&1 |
        tee "$out/study.log" | grep -E "stacked set|started|skipped|report:|real|error|rror"
    ;;
world)
    {
    nvidia-smi -L
    part "the default run (settle, then fit: the plain step; the floor and the ceiling beside it)"
    ( time timeout 240 python -m runners.train_online --device cuda \
        --out "$out/runs" ) 2>&1 | grep -vE "it/s|s/it"
    part "--preset gpu: the default learner fed 512 windows a step, 6,000 steps (bounds beside)"
    ( time timeout 210 python -m runners.train_online --device cuda --capture --preset gpu \
        --out "$out/runs" ) 2>&1 | grep -vE "it/s|s/it"
    stacked 90
    } 2>&1 | tee "$out/world.log"
    find "$out/runs" \( -name summary.json -o -name config.json \) -print0 |
        tar czf "$out/runs.tar.gz" --null -T - && rm -rf "$out/runs"
    ;;
tests)
    {
    part "GPU-marked tests, all"
    timeout 420 python -m pytest -q -m gpu tests -p no:cacheprovider --tb=short 2>&1 |
        grep -E "^E  |FAILED|passed|failed" | head -40
    part "a loop step split (paper preset, captured)"
    timeout 45 python -m benchmarks.profile_loop --device cuda --preset paper --protocol paper \
        --capture
    } 2>&1 | tee "$out/tests.log"
    ;;
figures)
    {
    nvidia-smi -L
    python -c "import torch; print('torch', torch.__version__)"
    part "GPU-marked tests"
    timeout 75 python -m pytest -q -m gpu tests -p no:cacheprovider \
        --tb=short 2>&1 | grep -E "^E  |FAILED|passed|failed" | head -40
    stacked 100
    part "loop end to end, paper preset (captured)"
    bench 70 test_end_to_end.py e2e-paper-captured --bench-preset paper --bench-precision bf16 \
        --bench-capture --bench-set stream_cache=false -k "worlds or paper-stream"
    part "the default run (settle, then fit: the plain step; the floor and the ceiling beside it)"
    ( time timeout 240 python -m runners.train_online --device cuda \
        --out "$out/runs" ) 2>&1 | tail -6
    } 2>&1 | tee "$out/log"
    ;;
*)
    echo "gpu_check: expected figures, tests, study or world, got '$what'" >&2; exit 2
    ;;
esac
