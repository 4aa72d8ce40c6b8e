"""Report writers: the summary, the documentation's quoted figures and the figures, generated from
the result files."""
