"""Planning: from a frozen graph to ONE ranked plan list, building and executing its plans."""
