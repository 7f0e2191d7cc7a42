{interval = 0.5, timeout = 30}
