module elasticctr.dev/pause

go 1.23.0
