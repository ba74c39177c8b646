"""The Streamlit layer: cached services, sidebar settings and rendering components (entry point: app/main.py)."""
