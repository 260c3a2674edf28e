"""A model package written the reference's way: it exports `graph`, `declaration` and `io`."""

from __future__ import annotations

import tensoracle

FEATURES, HIDDEN, CLASSES = 32, 64, 10

#: The engine's inputs and outputs, as the application sees them.
io = {
    "inputs": (tensoracle.TensorSpec("features", "f32", (-1, FEATURES)),),
    "outputs": (tensoracle.TensorSpec("probabilities", "f32", (-1, CLASSES)),),
}

#: Everything besides the weights that decides the engine (raise graph_version when graph() changes).
declaration = tensoracle.EngineDeclaration(
    name="tiny-classifier",
    graph_version=1,
    inputs=io["inputs"],
    outputs=io["outputs"],
    builder=tensoracle.BuilderConfig(
        target="auto", profiles={"features": ([1, FEATURES], [8, FEATURES], [64, FEATURES])}
    ),
)


def graph(weights: tensoracle.WeightStore) -> tensoracle.Network:
    """features -> linear -> GELU -> layer norm -> linear -> softmax; called by open_engine only on a cache miss."""
    net = tensoracle.Network()
    x = net.add_input("features", "f32", [-1, FEATURES])
    h = net.add_linear(x, weights["fc1.weight"], weights["fc1.bias"])
    h = net.add_activation("gelu", h)
    h = net.add_layer_norm(h, weights["norm.weight"], weights["norm.bias"])
    logits = net.add_linear(h, weights["fc2.weight"], weights["fc2.bias"])
    net.mark_output(net.add_softmax(logits, axis=-1), "probabilities")
    return net
