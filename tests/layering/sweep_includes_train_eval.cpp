// Layering probe, the control: sweep/ sees train/ and eval/. MUST compile.
#include "eval/svg_plot.h"
#include "train/run_config.h"
