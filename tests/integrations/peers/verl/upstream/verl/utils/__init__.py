"""Not verl's file: an empty package of this project, so that verl's sandbox_fusion scorer
imports without the rest of verl (see tests/integrations/peers/verl/ORIGIN)."""
