"""Training the guard: one loop for three policy paths (hard labels, distillation, head-only calibration)."""
