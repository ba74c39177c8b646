"""An evaluation as figures and as one self-contained HTML file."""
