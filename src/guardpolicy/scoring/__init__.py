"""One guard scored on the fetched benchmarks without the study (`guardpolicy score`, stage score@<guard>).

* `guards`: which guard and how (params `score.guards.<guard>` or the command line's flags), its name, the
  subsets scored, the views computed;
* `run`: the guard run on the benchmark prompts and the calibration split's (a model or endpoint through the
  baselines' backends and adapters, or one of our checkpoints through the evaluation's inference path) into
  its predictions table;
* `results`: from those predictions to the score tables (the three views' among them: the split's rows are
  their reference, never a benchmark) and the metrics.json document.

The stage (guardpolicy.stages.score) reads the params and inputs, calls these and writes the folder.
"""
