"""The dashboard pages: one module each, `render(root, runs)`."""
