"""Renderers of iotrace reports: terminal (rich), Markdown, self-contained HTML (plotly), PNG/SVG, JSON.

Renderers only draw: every number they show was computed by ``iotrace.trace.reports``.
"""
