"""The Plan: what a compiled graph runs (ARCHITECTURE.md "Plans are data").
steps.py owns the data (buffers, typed steps,
printing), build.py turns a fused graph into a Plan (`to_plan`), memory.py places its buffers
(liveness, in-place updates, best-fit arena) and reports its memory."""
