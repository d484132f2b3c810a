# session 15 call 5 (code of afab60d): MODELS=bert,distilbert BENCH_LIMIT=130 bash benchmarks/gpu_session.sh hf-train
