"""Offline tools: publish's runtime conversion and gates, and the image build's import check. Nothing the server runs
imports them."""
