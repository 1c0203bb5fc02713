"""Experiments the appendix and the GPU run need: they import the core, which never imports them."""
