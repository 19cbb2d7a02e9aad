"""After the search: the finalists re-measured, the pick proven against the baseline, and what the
study hands on (report, exports, plots, the console's summary).

    finalists   choose the finalists; re-measure them in interleaved rounds on a window
    verdict     the paired interval of pick - baseline, and the verdict
    conclude    Conclusion: selection, pick, proof, verdict, what best.yaml holds
    kept        the conclusion's measurements kept in the study (a rerun resumes from them)
    report      report.md
    summary     the report's inputs, the study plots, the console summary, best.yaml's metadata
    export      best.yaml, vllm.yaml, report.md: atomic, loaded back
    plots       optimization history, importances, Pareto front, capacity curve, latency CDF
"""
