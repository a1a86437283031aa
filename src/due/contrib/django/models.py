"""No models: due's tables are its own (see schema.py). This module exists so
Django sends this app the `post_migrate` signal, which only apps with a models
module receive."""
