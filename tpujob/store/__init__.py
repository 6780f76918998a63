"""The persistent job store. Import `tpujob.store.repository` for the Store itself."""
