"""The course's models: one module per model (definition, training, export), and the opset/IR contract they share."""
