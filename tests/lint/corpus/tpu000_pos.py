def broken(:  # expect: TPU000
    pass
