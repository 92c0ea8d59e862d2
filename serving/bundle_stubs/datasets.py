"""Stand-in for Hugging Face datasets on a GPU machine without it: sglang's benchmark client imports it at module load.

Installed by `serving.bundle install` only where the machine has no datasets (its wheel pulls pyarrow, more than
the bundle's budget). `sglang.bench_serving` imports `load_dataset` for its MMMU dataset alone; `random-ids` and
`run_eval --gsm8k-data-path FILE` never call it. Any use raises at once, naming what is missing.
"""


def _missing(name):
    def call(*_args, **_kwargs):
        raise ImportError(f"datasets.{name}: the offline bundle carries a stand-in for datasets; install the real "
                          "datasets to load a hub dataset")
    call.__name__ = name
    return call


# the names sglang's client modules import by name (`from datasets import ...`)
load_dataset = _missing("load_dataset")
concatenate_datasets = _missing("concatenate_datasets")


def __getattr__(name):
    if name.startswith("__"):    # import machinery and hasattr() probes: a plain module without them
        raise AttributeError(name)
    raise ImportError(f"datasets.{name}: the offline bundle carries a stand-in for datasets; install the real "
                      "datasets to use it")
