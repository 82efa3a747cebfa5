"""The Changefeeds view: the FastAPI app (``changefeeds``), the status it shows (``status``), its HTML (``html``)."""
