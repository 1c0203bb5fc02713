"""What the series checks and measures the core with: exact laws and tests, the campaign, the
experiments, the GPU run. The core never imports them."""
