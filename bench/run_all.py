"""`make bench`: every benchmark in turn, printing its figures (minutes to an hour on 2 cores).

The eval store (.ks/pg15) is built first if missing (embeds the corpus once).
Pass names to run a subset: `python bench/run_all.py lexical search`.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
STEPS = {
    "ingest": ["bench_ingest.py", "--pages", "100"],
    "embedding": ["bench_embedding.py"],
    "lexical": ["bench_lexical.py"],
    "vector": ["bench_vector.py"],
    "fusion": ["eval_fusion.py"],
    "search": ["bench_search.py", "--store", ".ks/pg15"],
    "acl": ["bench_acl.py"],
    "query_graph": ["bench_query_graph.py"],
    "serve": ["bench_serve.py", "--store", ".ks/pg15", "--clients", "32", "--seconds", "60"],
    "engines": ["bench_engines.py"],
    "crawl": ["bench_crawl.py"],
    "bad_input": ["bad_input.py"],
    "kill_soak": ["kill_soak.py", "--kills", "50"],
}


def main() -> None:
    wanted = sys.argv[1:] or list(STEPS)
    unknown = [w for w in wanted if w not in STEPS]
    if unknown:
        sys.exit(f"unknown benchmark {unknown}; choose from {', '.join(STEPS)}")
    sys.path.insert(0, str(HERE))
    from common import pg15_store

    pg15_store()
    failed = []
    for name in wanted:
        script, *args = STEPS[name]
        print(f"\n=== {name}: {script} {' '.join(args)}", flush=True)
        code = subprocess.call([sys.executable, str(HERE / script), *args], cwd=HERE.parent)
        if code:
            failed.append(name)
    if failed:
        sys.exit(f"failed: {', '.join(failed)}")


if __name__ == "__main__":
    main()
