"""What the course's models agree on: the opset and IR version of hand-built graphs, and the digits task.

Hand-built and generated graphs (notebooks 01, 07, 08, 10 and their exercises) use ``OPSET`` and
``IR_VERSION``, so one edit moves them all. Exports keep their tool's choice on purpose: the torch
exporter's default opset (notebook 02 shows which) and the converters' targets (03, 04).

The digits models of notebooks 02 (PyTorch) and 03 (Keras) are twins: the same input and output
(what the service of notebook 08 and the web demo of 09 feed and read) and the same training recipe.
"""

OPSET = 21
IR_VERSION = 10

INPUT_NAME = "image"  # float32 (N, 1, 8, 8), pixels in [0, 1]
OUTPUT_NAME = "logits"  # float32 (N, 10)
IMAGE_SHAPE = (1, 8, 8)
NUM_CLASSES = 10

SEED = 0
BATCH_SIZE = 32
LEARNING_RATE = 3e-3
