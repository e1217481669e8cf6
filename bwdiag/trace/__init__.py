"""Read traces: files and folders of ranks → linked, normalised tables (the one place HTA is used)."""

from bwdiag.trace.load import RankTrace, find_trace_files, load_rank, load_traces

__all__ = ["RankTrace", "find_trace_files", "load_rank", "load_traces"]
