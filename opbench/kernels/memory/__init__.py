"""Memory-bound kernels: norms, softmax, activations, elementwise joins, pooling, data movement,
embedding, rope."""
