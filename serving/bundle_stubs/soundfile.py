"""Stand-in for soundfile on a GPU machine without it: sglang's audio entry points import it at module load.

Installed by `serving.bundle install` only where the machine has no soundfile (its wheel needs libsndfile).
The text-only DeepSeek-V4 server never decodes audio; any use raises at once, naming what is missing.
"""


def __getattr__(name):
    if name.startswith("__"):    # import machinery and hasattr() probes: a plain module without them
        raise AttributeError(name)
    raise ImportError(f"soundfile.{name}: the offline bundle carries a stand-in for soundfile (no audio "
                      "support); install the real soundfile to decode audio")
