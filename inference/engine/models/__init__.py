"""Our compact model code, one file per architecture family."""
