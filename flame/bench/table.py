"""The suite's table of cases, in report order: the stateless kernels, fused attention forward +
backward, then the training steps, then the transformer training steps (bf16: GPT, then the
Llama-style block; then mixed precision and memory budgets), LoRA fine-tuning and the convolutional
training steps."""

from flame.bench.cases import STATELESS
from flame.bench.cases_amp import AMP
from flame.bench.cases_attention import ATTENTION
from flame.bench.cases_conv import CONV
from flame.bench.cases_gpt import GPT
from flame.bench.cases_llama import LLAMA
from flame.bench.cases_lora import LORA
from flame.bench.cases_train import TRAINING

CASES = [*STATELESS, *ATTENTION, *TRAINING, *GPT, *LLAMA, *AMP, *LORA, *CONV]
