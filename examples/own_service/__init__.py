"""Your own service as the destination: an orders service that deduplicates on a database
constraint (`service`), the jobs that call it and the table that judges them (`jobs`)."""
