# session 15 call 4: HOST_LIMIT=140 bash benchmarks/gpu_session.sh bert-train-host (code of afab60d)
