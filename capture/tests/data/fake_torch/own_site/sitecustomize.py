# The workload's own sitecustomize: must still run when the module hook is on the path ahead of it.
CHAINED = "yes"
