"""The sizes that more than one benchmark uses: the entry points that measure with them and the
summary that quotes them read them here."""

#: position-attention layers at PiT's defaults
LAYER_WIDTH, LAYER_HEADS = 64, 2

#: ``speed/local_attention.py``: PiT's encoder field (a 1% quantile onto a 1024-node latent mesh)
#: and local self-attention over the 8 nearest neighbours
LOCAL_QUANTILE, LOCAL_LATENT, LOCAL_K = 0.01, 1024, 8

#: ``speed/whole_models.py``: Elasticity-like samples (972 nodes, 42 per-sample parameters) and
#: the issue's PiT setting that the three models share (width 64, 2 heads, 4 blocks, 2% quantile
#: fields, a latent mesh of 972 nodes)
ELASTICITY_NODES, ELASTICITY_PARAMS = 972, 42
PIT_WIDTH, PIT_HEADS, PIT_BLOCKS, PIT_QUANTILE, PIT_LATENT = 64, 2, 4, 0.02, 972
#: neighbours of PiT's kNN variant: what the 2% quantile gives on the 972-node training mesh
PIT_KNN = round(PIT_QUANTILE * ELASTICITY_NODES)

#: ``speed/neighbor_search.py``: a 1024-node latent mesh, 16 neighbours, PiT's 1% quantile field
FIELD_LATENT, FIELD_K, FIELD_QUANTILE = 1024, 16, 0.01
