"""The local web dashboard (`tpujob ui`): app.py serves it, svg.py draws its pictures."""
