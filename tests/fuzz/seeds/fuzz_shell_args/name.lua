"job-a"
