"""The graph IR: tensors, nodes, the uid namespace, dtypes and shape helpers."""
