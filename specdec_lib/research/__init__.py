"""The experiments the series runs (the campaign, the appendix's, the GPU run): they import the
core, which never imports them."""
