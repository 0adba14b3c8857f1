"""One-off GPU measurements beside the suite, each run from a checkout as
`python3 -m benchmarks.scripts.NAME [options]`: dispatch_gap (a call alone vs back to back vs its host
time), first_measure (copy bandwidth vs one flame kernel), host_overhead (where a small training
step's host time goes), mlp_step_graphs (a training step with and without CUDA graphs),
probe_cudnn_sdpa (cuDNN fused attention: error vs torch, forward/backward ms), tune_fused (launch-shape
variants of the fused kernels). Their outputs go to benchmarks/results/."""
