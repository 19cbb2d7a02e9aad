"""`python -m runtime.serve --config best.yaml [--host 127.0.0.1] [--port 8000]`: see runtime.serve.cli."""

from runtime.serve.cli import main

raise SystemExit(main())
