"""flame.utils.data: torch.utils.data's interface. Datasets (`Dataset`, `IterableDataset`,
`TensorDataset`, `StackDataset`, `Subset`, `ConcatDataset`, `ChainDataset`, `random_split`),
samplers (`SequentialSampler`, `RandomSampler`, `SubsetRandomSampler`, `WeightedRandomSampler`,
`BatchSampler`, and `DistributedSampler`, which shards indices over the ranks of a process group) and `DataLoader`
(batching, shuffling with a generator, drop_last, collate_fn, worker processes, pinned host
buffers with an asynchronous copy to the GPU)."""

from flame.utils.data.dataloader import DataLoader, default_collate, default_convert, get_worker_info
from flame.utils.data.dataset import (
    ChainDataset,
    ConcatDataset,
    Dataset,
    IterableDataset,
    StackDataset,
    Subset,
    TensorDataset,
    random_split,
)
from flame.utils.data.distributed import DistributedSampler
from flame.utils.data.sampler import (
    BatchSampler,
    RandomSampler,
    Sampler,
    SequentialSampler,
    SubsetRandomSampler,
    WeightedRandomSampler,
)

__all__ = [
    "BatchSampler",
    "ChainDataset",
    "ConcatDataset",
    "DataLoader",
    "Dataset",
    "DistributedSampler",
    "IterableDataset",
    "RandomSampler",
    "Sampler",
    "StackDataset",
    "SequentialSampler",
    "Subset",
    "SubsetRandomSampler",
    "TensorDataset",
    "WeightedRandomSampler",
    "default_collate",
    "default_convert",
    "get_worker_info",
    "random_split",
]
