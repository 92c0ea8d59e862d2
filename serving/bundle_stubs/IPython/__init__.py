"""Stand-in for IPython on a GPU machine without it: sglang/utils.py imports IPython.display at module load (notebook helpers only).

Installed by `serving.bundle install` only where the machine has no IPython. It is a real package on the
path (so importlib.util.find_spec, which transformers calls, sees a proper spec), carries no dist-info
(so transformers' version checks still report IPython as absent), and does nothing.
"""
