"""The guard model (encoder + coarse, pillar and span heads) and the backbones it is built on."""
