"""What the series checks and measures the core with: the exact laws and goodness-of-fit tests
(``stats``, ``power``, ``exactness``), the campaign, the appendix's experiments, the GPU run. They
import the core, which never imports them."""
